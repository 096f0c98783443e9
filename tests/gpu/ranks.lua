-- ranks.lua: the recipe's GPT trained by 2 and 3 ranks as 1 rank trains it, on one device that
-- the ranks share: on a GPU (default cuda:0: every rank on it, so their buffers' collectives go
-- through host memory, the staged communicator) or on the CPU ("cpu": CPU ranks, which checks
-- this script and the recipe's rank logic on any machine). The same global batch of 6 sequences
-- (6, 3 and 2 per rank), 4 steps; per step, every loss of 2 and 3 ranks within 1e-4 of 1 rank's
-- (fp32 throughout: --matmul fp32, --muon-precision fp32; the ranks' sums only add in another
-- order), for the layer-wise optimizer with the cost layout and with packed, legacy, ZeRO 1, 2, 3
-- and row-sharded ZeRO-3; a mixture of experts at --ep 2 against --ep 1; --tp 2 against --tp 1.
-- Then checkpoints across devices and rank counts: 2 ranks on the device save at step 2 and 1
-- CPU rank resumes to step 4, and the reverse, each within 1e-4 of the run not interrupted. On a
-- GPU, the start-up line must say why the ranks' collectives are staged. Its corpus is made here
-- (tests/lua/corpus.lua). Exit 77 (skipped) when the device is a GPU and CUDA is not available.
-- Usage: bin/lwopt run tests/gpu/ranks.lua [DEVICE]   (from the repo root; default cuda:0)
local tally = dofile("tests/lua/tally.lua")
local expect = tally.expect

local DEVICE = dofile("tests/gpu/require_gpu.lua")("tests/gpu/ranks.lua", "cuda:0")
local dir = tally.tempdir()
local data = dofile("tests/lua/corpus.lua").write(dir .. "/corpus.txt", 2 ^ 20, 5)
local TOLERANCE = 1e-4
local STEPS = 4

-- Runs the recipe on np ranks; returns whether it succeeded, its per-step losses (from its JSON
-- log: the shortest exact text) and its output.
local runs = 0
local function recipe(np, args, device)
   runs = runs + 1
   local name = ("%s/run%02d"):format(dir, runs)
   local launcher = np > 1 and ("mpirun --oversubscribe -np %d -x OPENBLAS_NUM_THREADS=1 "):format(np)
      or ""
   local cmd = ("%sbin/lwopt run recipes/gpt_small.lua --data %s --preset tiny --steps %d "
      .. "--warmup 1 --lr 3e-3 --eval-every 0 --eval-max 2 --sample 0 --timeout 120 --matmul fp32 "
      .. "--muon-precision fp32 --param-dtype fp32 --progress lines --device %s --log %s.jsonl %s "
      .. "> %s.out 2>&1")
      :format(launcher, data, STEPS, device or DEVICE, name, args, name)
   local ok = tally.sh(cmd)
   local text = tally.slurp(name .. ".out") or ""
   -- without gnuplot the loss curve fails after the run's work; the losses are what counts
   if not ok and text:find("failed: loss curve: gnuplot is not installed", 1, true) then
      ok = true
   end
   if not ok then io.stderr:write(cmd, " failed:\n", text, "\n") end
   return ok, tally.losses(name .. ".jsonl"), text
end

-- Every step's loss of `got` within TOLERANCE of `want`'s (steps from `first`).
local function same_losses(what, got, want, first)
   first = first or 1
   local worst, n = 0, 0
   for i = first, STEPS do
      if got[i - first + 1] == nil or want[i] == nil then
         worst = 0 / 0
      else
         local d = math.abs(got[i - first + 1] - want[i])
         if not (d <= worst) then worst = d end
      end
      n = n + 1
   end
   local line = ("%s: %d losses within %g of 1 rank's (worst %.3g)"):format(what, n, TOLERANCE,
      worst)
   print(line)
   expect(worst <= TOLERANCE, line)
end

-- 1 rank, then 2 and 3 on the same device, global batch 6.
local function across_ranks(what, args)
   local _, one = recipe(1, "--batch 6 " .. args)
   expect(#one == STEPS, ("%s: 1 rank wrote %d losses (%d)"):format(what, STEPS, #one))
   for _, np in ipairs({ 2, 3 }) do
      local ok, losses, text = recipe(np, ("--batch %d %s"):format(6 / np, args))
      expect(ok, ("%s on %d ranks ran"):format(what, np))
      same_losses(("%s, %d ranks"):format(what, np), losses, one)
      if DEVICE ~= "cpu" then
         expect(text:find("collectives: staged: ranks 0 and 1 share one GPU", 1, true) ~= nil,
            ("%s, %d ranks: the start-up says the ranks' collectives are staged, and why")
               :format(what, np))
      end
   end
   return one
end

local base = across_ranks("layer-wise, cost layout", "--layout cost")
expect(#base == STEPS and base[STEPS] < base[1], "the loss falls")
across_ranks("packed layout", "--layout packed")
across_ranks("legacy", "--mode legacy")
across_ranks("ZeRO-2", "--zero 2")
across_ranks("ZeRO-3", "--zero 3")
across_ranks("row-sharded ZeRO-3", "--zero 3 --shard rows")

-- a mixture of experts: expert parallelism over 2 ranks against 1 rank holding every expert,
-- whose 2 micro-steps route and balance what the 2 ranks' micro-batches do
local moe = "--preset moe --n-expert 4 --batch 2"
local _, moe1 = recipe(1, moe .. " --accum 2 --ep 1")
local ok, moe2 = recipe(2, moe .. " --accum 1 --ep 2")
expect(ok and #moe1 == STEPS, "the mixture of experts ran on 1 rank and at --ep 2")
same_losses("mixture of experts, --ep 2", moe2, moe1)

-- tensor parallelism: 2 ranks split every layer and see the same batches
local _, tp1 = recipe(1, "--batch 4 --tp 1")
local tp_ok, tp2 = recipe(2, "--batch 4 --tp 2")
expect(tp_ok and #tp1 == STEPS, "--tp 2 ran")
same_losses("--tp 2", tp2, tp1)

-- checkpoints across devices and rank counts: saved at step 2, resumed to step 4, against the
-- run not interrupted (base: 1 rank on the device, global batch 6 = 3 x 2 ranks = 3 x accum 2)
local function handover(what, np_a, device_a, np_b, device_b)
   local ckpt = ("%s/ckpt-%d"):format(dir, runs)
   local batch = function(np) return ("--batch 3 --accum %d"):format(2 / np) end
   local ok_a = recipe(np_a, ("%s --layout cost --ckpt-dir %s --stop-after 2"):format(batch(np_a),
      ckpt), device_a)
   local ok_b, losses, text = recipe(np_b, ("%s --layout cost --ckpt-dir %s --resume")
      :format(batch(np_b), ckpt), device_b)
   expect(ok_a and ok_b and text:find("resumed from", 1, true) ~= nil, what .. ": resumed")
   same_losses(what .. ", steps 3-4", losses, base, 3)
end
handover(("2 ranks on %s, then 1 CPU rank"):format(DEVICE), 2, DEVICE, 1, "cpu")
handover(("1 CPU rank, then 2 ranks on %s"):format(DEVICE), 1, "cpu", 2, DEVICE)

os.execute("rm -rf " .. dir)
tally.finish("tests/gpu/ranks.lua")
