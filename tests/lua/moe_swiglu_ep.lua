-- moe_swiglu_ep.lua: a LLaMA-style mixture of experts (lw.models' llama: SwiGLU experts, a
-- shared expert, 4 experts, top-2) trained through the library API: expert parallelism (ep 2 on
-- 2 ranks) equals ep 1 on one rank over the same global batch within 1e-5 (losses and every
-- parameter by name; dropless routing sends the same tokens to the same experts), at ZeRO-1, 2
-- and 3; with bf16 parameters (fp32 master weights) ep 2 tracks ep 1 within 1e-3 nats and fp32
-- within 0.01 (bf16's rounding of the weights, as dtype_consistency.lua bounds it). train_run.lua
-- also checks that the ranks hold bit-identical parameters (experts within each expert-DP group).
-- Prints "N passed, M failed".
-- Usage: bin/lwopt run tests/lua/moe_swiglu_ep.lua (from the repo root; needs data/kjv.txt)
local tally = dofile("tests/lua/tally.lua")
local expect = tally.expect
local runs = dofile("tests/lua/train_runs.lua")
local run, max_loss_diff, max_param_diff = runs.run, runs.max_loss_diff, runs.max_param_diff

local common = "--arch llama --experts 4 --batch 1 --steps 3 --ep "
local ep1 = run("swiglu-ep1", 1, common .. "1 --accum 2")
expect(#ep1.losses == 4, "ep 1 wrote 3 losses and a validation loss")
for zero = 1, 3 do
   local ep2 = run("swiglu-ep2-z" .. zero, 2, common .. "2 --accum 1 --zero " .. zero)
   expect(max_loss_diff(ep1, ep2) < 1e-5, ("SwiGLU experts: ep 2 (ZeRO-%d) and ep 1 losses "
      .. "within 1e-5 (%g)"):format(zero, max_loss_diff(ep1, ep2)))
   expect(max_param_diff(ep1, ep2) < 1e-5, ("SwiGLU experts: ep 2 (ZeRO-%d) and ep 1 parameters "
      .. "within 1e-5 (%g)"):format(zero, max_param_diff(ep1, ep2)))
end

local bf1 = run("swiglu-ep1-bf16", 1, common .. "1 --accum 2 --param-dtype bf16")
local bf2 = run("swiglu-ep2-bf16", 2, common .. "2 --accum 1 --param-dtype bf16")
expect(max_loss_diff(bf1, bf2) < 1e-3, ("SwiGLU experts, bf16 parameters: ep 2 and ep 1 losses "
   .. "within 1e-3 (%g)"):format(max_loss_diff(bf1, bf2)))
expect(max_loss_diff(bf2, ep1) < 0.01, ("SwiGLU experts: bf16 parameters at ep 2 track fp32 "
   .. "within 0.01 (%g)"):format(max_loss_diff(bf2, ep1)))

tally.finish("moe_swiglu_ep")
