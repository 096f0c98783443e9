-- train.lua: GPU training end to end against the CPU, through the recipe users run. The same
-- 20 steps of recipes/gpt_small.lua (preset small, Muon, fp32 Newton-Schulz) on the CPU and on
-- the GPU (fp32 model kernels) give losses within 1e-4 of each other at every step; on the GPU,
-- overlap on and off give the same losses bit for bit (its kernels are deterministic and one
-- rank's syncs move nothing). The same 20 steps with bf16 GEMMs (--matmul bf16) stay within
-- 0.05 of the CPU's losses and fall as they do, with bf16 activations next to fp32 ones (within
-- 1e-3), and with bf16 parameters too (fp32 master weights). Then a short run with everything a
-- user sees on the GPU: progress lines, the JSON log with the GPU's memory, a checkpoint and its
-- resume, the loss curve and a sample. Its corpus is made here (tests/lua/corpus.lua): nothing
-- outside the tree is needed. Exit 77 (skipped) when CUDA is not available.
-- Usage (ctest -L gpu): bin/lwopt run tests/gpu/train.lua [DEVICE] ("cpu": CPU against CPU).
local tally = dofile("tests/lua/tally.lua")
local expect = tally.expect

local GPU = dofile("tests/gpu/require_gpu.lua")("tests/gpu/train.lua")
local dir = tally.tempdir()
local data = dofile("tests/lua/corpus.lua").write(dir .. "/corpus.txt", 2 ^ 21, 11)

-- A GPU machine may lack gnuplot: a recipe run with --log then says the loss curve failed and
-- exits 1 after its work, which is what is checked there instead of the curve.
local gnuplot = tally.sh("command -v gnuplot > /dev/null 2>&1")

-- Runs the recipe with `args`; returns whether it succeeded and its output.
local function recipe(args, name)
   local out = dir .. "/" .. name .. ".out"
   local ok = tally.sh(("bin/lwopt run recipes/gpt_small.lua --data %s %s > %s 2>&1"):format(data,
      args, out))
   local text = tally.slurp(out) or ""
   if not ok then io.stderr:write(name, " failed:\n", text, "\n") end
   return ok, text
end

local STEPS = 20
-- params, activations: the parameters' and activations' dtypes (fp32 unless said: with bf16
-- GEMMs the GPU's defaults are bf16)
local function train(device, overlap, matmul, params, activations)
   matmul, params, activations = matmul or "fp32", params or "fp32", activations or "fp32"
   local name = device:gsub(":", "") .. "-overlap-" .. overlap .. "-" .. matmul .. "-" .. params
      .. "-" .. activations
   local log = dir .. "/" .. name .. ".jsonl"
   local ok = recipe(("--preset small --steps %d --eval-every 0 --eval-max 4 --sample 0 --quiet "
      .. "--muon-precision fp32 --device %s --overlap %s --matmul %s --param-dtype %s "
      .. "--activations %s --log %s"):format(STEPS, device, overlap, matmul, params, activations,
      log), name)
   expect(ok == gnuplot, name .. " ran")
   return tally.losses(log)
end

local cpu = train("cpu", "on")
local gpu_on = train(GPU, "on")
local gpu_off = train(GPU, "off")
expect(#cpu == STEPS and #gpu_on == STEPS and #gpu_off == STEPS,
   ("%d losses each (cpu %d, overlap on %d, off %d)"):format(STEPS, #cpu, #gpu_on, #gpu_off))
local worst, same = 0, true
for i = 1, math.min(#cpu, #gpu_on, #gpu_off) do
   local d = math.abs(gpu_on[i] - cpu[i])
   if not (d <= worst) then worst = d end
   same = same and gpu_on[i] == gpu_off[i]
end
print(("losses: step 1 %.6f -> step %d %.6f on the CPU; max |%s - cpu| over %d steps %.2e")
   :format(cpu[1] or 0 / 0, #cpu, cpu[#cpu] or 0 / 0, GPU, #cpu, worst))
expect(worst <= 1e-4, ("%s tracks the CPU within 1e-4 (max diff %g)"):format(GPU, worst))
expect(same, GPU .. ": overlap on and off give the same losses bit for bit")
expect(#cpu > 1 and cpu[#cpu] < cpu[1] - 0.3, "the loss falls (the run trains)")

-- bf16 GEMMs (autocast's arithmetic: operands rounded to 8 significant bits, fp32 sums; here
-- fp32 weights and activations): each GEMM is ~2e-3 of its outputs' scale from fp32
-- (tests/kernels/linear.c), so a step's loss moves by a few 1e-3 at once, and the difference
-- in the gradients compounds over 20 updates: a few 1e-2 between autocast and fp32 on losses of
-- ~2.6 to ~5.6 is typical of such runs. 0.05 allows that and still fails a bf16 path that is
-- wrong (a mis-oriented or mis-rounded operand moves the loss by far more, or stops it falling).
local gpu_bf16 = train(GPU, "on", "bf16")
expect(#gpu_bf16 == STEPS, ("%d losses with bf16 GEMMs (%d)"):format(STEPS, #gpu_bf16))
local worst_bf16 = 0
for i = 1, math.min(#cpu, #gpu_bf16) do
   local d = math.abs(gpu_bf16[i] - cpu[i])
   if not (d <= worst_bf16) then worst_bf16 = d end
end
print(("losses with bf16 GEMMs: step 1 %.6f -> step %d %.6f; max |bf16 - cpu| over %d steps %.2e")
   :format(gpu_bf16[1] or 0 / 0, #gpu_bf16, gpu_bf16[#gpu_bf16] or 0 / 0, #gpu_bf16, worst_bf16))
expect(worst_bf16 <= 0.05, ("%s with bf16 GEMMs tracks the CPU within 0.05 (max diff %g)")
   :format(GPU, worst_bf16))
expect(#gpu_bf16 > 1 and gpu_bf16[#gpu_bf16] < gpu_bf16[1] - 0.3,
   "the loss falls with bf16 GEMMs as on the CPU")

-- bf16 activations (the layer norms', the attention's and GELU's outputs kept in bf16, the
-- default with bf16 GEMMs on a GPU): rounded as the GEMMs round their fp32 operands, so the
-- GEMMs read the same bf16 values, and so are the gradients QKV's and fc's backwards read. The
-- roundings of their own: the attention's backward reads its rounded output (D = rowsum(dout
-- out)), the attention and GELU read QKV's and fc's outputs rounded, the loss comes from
-- rounded logits. As on the CPU (fp32 GEMMs, where all of them are roundings of their own: 1.6e-4
-- over these 20 steps): within 1e-3.
local gpu_act = train(GPU, "on", "bf16", "fp32", "bf16")
local worst_act, same_act = 0, #gpu_act == #gpu_bf16
for i = 1, math.min(#gpu_act, #gpu_bf16) do
   local d = math.abs(gpu_act[i] - gpu_bf16[i])
   if not (d <= worst_act) then worst_act = d end
   same_act = same_act and gpu_act[i] == gpu_bf16[i]
end
print(("losses with bf16 GEMMs and activations: max |bf16 - fp32 activations| over %d steps %.2e"
   .. "%s"):format(#gpu_act, worst_act, same_act and " (the same bits)" or ""))
expect(#gpu_act == STEPS and worst_act <= 1e-3, ("%s: bf16 activations track fp32 ones within "
   .. "1e-3 with bf16 GEMMs (max diff %g)"):format(GPU, worst_act))

-- bf16 parameters with fp32 master weights on top (the GPU's default): the weights the forward
-- reads are rounded to bf16 (2^-9 relative); against the same run on fp32 parameters that moves
-- the losses by 0.023 over these 20 steps on the CPU (bin/lwopt run tests/gpu/train.lua cpu):
-- within 0.05 of the bf16-GEMM run, and falling.
local gpu_params = train(GPU, "on", "bf16", "bf16")
local worst_params = 0
for i = 1, math.min(#gpu_bf16, #gpu_params) do
   local d = math.abs(gpu_params[i] - gpu_bf16[i])
   if not (d <= worst_params) then worst_params = d end
end
print(("losses with bf16 GEMMs and parameters: max |bf16 params - fp32 params| over %d steps "
   .. "%.2e"):format(#gpu_params, worst_params))
expect(#gpu_params == STEPS and worst_params <= 0.05, ("%s: bf16 parameters track fp32 ones "
   .. "within 0.05 with bf16 GEMMs (max diff %g)"):format(GPU, worst_params))
expect(#gpu_params > 1 and gpu_params[#gpu_params] < gpu_params[1] - 0.3,
   "the loss falls with bf16 parameters")

-- Everything a user sees, on the device: 4 steps checkpointed at 2 and resumed from there.
local ckpt, log = dir .. "/ckpt", dir .. "/user.jsonl"
local common = ("--preset tiny --steps 4 --eval-every 2 --device %s --ckpt-dir %s --ckpt-every 2 "
   .. "--log %s --progress lines"):format(GPU, ckpt, log)
local ok, text = recipe(common .. " --stop-after 2 --sample 0", "user-first")
expect(ok == gnuplot, "the first half ran")
ok, text = recipe(common .. " --resume --sample 40", "user-resumed")
expect(ok == gnuplot, "the resumed half ran")
expect(text:find("resumed from", 1, true) ~= nil, "it resumed from the checkpoint")
expect(text:find("device: " .. (GPU == "cpu" and "cpu" or "cuda"), 1, true) ~= nil,
   "the device line names the device")
expect(text:find("step%s+4/4") ~= nil, "progress lines")
expect(text:find("sample:\n", 1, true) ~= nil, "a sample")
if gnuplot then
   expect(text:find("loss curve: ", 1, true) ~= nil, "the loss curve")
else
   expect(text:find("failed: loss curve: gnuplot is not installed", 1, true) ~= nil,
      "without gnuplot, the loss curve's failure is said")
end
local log_text = tally.slurp(log) or ""
expect(log_text:find('"memory_mb"', 1, true) ~= nil, "the log has memory per rank")
expect(log_text:find('"kind":"config"', 1, true) ~= nil, "the log opens with the configuration")
expect(log_text:find('"devices":[{"device":"' .. (GPU == "cpu" and "cpu" or "cuda:"), 1, true)
   ~= nil, "the configuration record names the rank's device")
if GPU ~= "cpu" then
   expect(text:find("gpu in use", 1, true) ~= nil, "the memory table has the GPU's column")
   expect(log_text:find('"gpu":', 1, true) ~= nil, "the log has the GPU's memory")
end
os.execute("rm -rf " .. dir)
tally.finish("tests/gpu/train.lua")
