-- train_consistency.lua: the training loop's invariants across runs (issue 4, section 9):
-- the same global batch (12 sequences) split as dp 1 x accum 6, dp 2 x accum 3 and dp 3 x
-- accum 2 gives the same losses within 1e-4 over 5 steps; overlap on and off give bit-identical
-- parameters; layer-wise and replicated agree within 1e-5. Each run also checks that its ranks
-- hold bit-identical parameters. Prints "N passed, M failed".
-- Usage: bin/lwopt run tests/lua/train_consistency.lua (from the repo root; needs data/kjv.txt)
local ffi = require("ffi")

local tmp = os.tmpname()
os.remove(tmp)
local tally = dofile("tests/lua/tally.lua")
local expect = tally.expect

local function run(name, np, args)
   local out = tmp .. "-" .. name
   local launcher = np > 1 and ("mpirun --oversubscribe -np " .. np .. " -x OPENBLAS_NUM_THREADS=1 ")
      or ""
   local cmd = launcher .. "bin/lwopt run tests/lua/train_run.lua --out " .. out .. " " .. args
   local ok = os.execute(cmd)
   if ok ~= 0 and ok ~= true then error("failed: " .. cmd) end
   local losses = {}
   for line in io.lines(out .. ".losses") do losses[#losses + 1] = tonumber(line) end
   local f = assert(io.open(out .. ".params", "rb"))
   local params = f:read("*a")
   f:close()
   os.remove(out .. ".losses")
   os.remove(out .. ".params")
   return { losses = losses, params = params }
end

local function max_loss_diff(a, b)
   local m = 0
   for i = 1, #a.losses do m = math.max(m, math.abs(a.losses[i] - b.losses[i])) end
   return m
end

local function max_param_diff(a, b)
   local n = #a.params / 4
   local x = ffi.cast("const float *", a.params)
   local y = ffi.cast("const float *", b.params)
   local m = 0
   for i = 0, n - 1 do m = math.max(m, math.abs(x[i] - y[i])) end
   return m
end

local dp1 = run("dp1", 1, "--batch 2 --accum 6")
local dp2 = run("dp2", 2, "--batch 2 --accum 3")
local dp3 = run("dp3", 3, "--batch 2 --accum 2")
expect(#dp1.losses == 6, "dp 1 wrote 5 losses and a validation loss")
expect(max_loss_diff(dp1, dp2) < 1e-4, ("dp 1 and dp 2 losses within 1e-4 (%g)"):format(max_loss_diff(dp1, dp2)))
expect(max_loss_diff(dp1, dp3) < 1e-4, ("dp 1 and dp 3 losses within 1e-4 (%g)"):format(max_loss_diff(dp1, dp3)))
expect(dp1.losses[5] < dp1.losses[1], "the loss goes down")

local off = run("off", 2, "--batch 2 --accum 3 --overlap off")
expect(off.params == dp2.params, "overlap on and off give bit-identical parameters")

local replicated = run("rep", 2, "--batch 2 --accum 3 --mode replicated")
expect(max_param_diff(replicated, dp2) < 1e-5,
   ("layer-wise and replicated within 1e-5 (%g)"):format(max_param_diff(replicated, dp2)))
local legacy = run("legacy", 3, "--batch 2 --accum 2 --mode legacy")
expect(max_param_diff(legacy, dp3) < 1e-5,
   ("legacy and layer-wise within 1e-5 (%g)"):format(max_param_diff(legacy, dp3)))
local adamw = run("adamw", 2, "--batch 2 --accum 3 --optimizer adamw")
expect(adamw.params ~= dp2.params, "adamw for everything trains differently")

tally.finish("train_consistency")
