-- train_consistency.lua: the training loop's invariants across runs:
-- the same global batch (12 sequences) split as dp 1 x accum 6, dp 2 x accum 3 and dp 3 x
-- accum 2 gives the same losses within 1e-4 over 5 steps; overlap on and off give bit-identical
-- parameters; layer-wise and replicated agree within 1e-5; ZeRO-2, ZeRO-3 and row-sharded ZeRO-3
-- agree with ZeRO-1 within 1e-5 at dp 1, 2 and 3 for every layout, packed (unequal shards)
-- with replicated at dp 1-3 and at dp 4 at every ZeRO level; at dp 4 with ZeRO-3
-- the parameters and gradients held stay under a quarter of the model plus the two largest
-- bucket groups; a mixture of experts (8 experts, top-2, expert buffers data-parallel
-- over every rank) at dp 2 equals dp 1 within 1e-5, at ZeRO-1 and ZeRO-3; expert parallelism
-- (ep 2, and ep 2 x expert-DP 2 at ZeRO-1 and 3) equals ep 1 within 1e-5, bad ep refused with
-- its numbers. Each run also checks
-- that its ranks hold bit-identical parameters. Prints "N passed, M failed".
-- Usage: bin/lwopt run tests/lua/train_consistency.lua (from the repo root; needs data/kjv.txt)
local tally = dofile("tests/lua/tally.lua")
local expect = tally.expect
local runs = dofile("tests/lua/train_runs.lua")
local run, max_loss_diff, max_param_diff = runs.run, runs.max_loss_diff, runs.max_param_diff

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

-- ZeRO levels: the same training, sharded further
for np = 1, 3 do
   local args = ("--batch 2 --accum %d"):format(6 / np)
   for _, layout in ipairs({ "cost", "lpt", "size_matching", "packed" }) do
      local base = run(("z1-%s-%d"):format(layout, np), np, args .. " --layout " .. layout)
      if layout == "packed" then -- shards of unequal size: against replicated data parallelism
         local rep = run("rep-" .. np, np, args .. " --mode replicated")
         expect(max_param_diff(base, rep) < 1e-5, ("packed and replicated within 1e-5 at dp %d "
            .. "(%g)"):format(np, max_param_diff(base, rep)))
      end
      for zero = 2, 3 do
         local z = run(("z%d-%s-%d"):format(zero, layout, np), np,
            ("%s --layout %s --zero %d"):format(args, layout, zero))
         expect(max_param_diff(z, base) < 1e-5, ("ZeRO-%d and ZeRO-1 within 1e-5 at dp %d, %s (%g)")
            :format(zero, np, layout, max_param_diff(z, base)))
         expect(z.memory.over == 0, ("ZeRO-%d at dp %d (%s) stayed within its block budget")
            :format(zero, np, layout))
      end
      if layout == "cost" then
         local rows = run("rows-" .. np, np, args .. " --zero 3 --shard rows")
         expect(max_param_diff(rows, base) < 1e-5, ("row-sharded ZeRO-3 and ZeRO-1 within 1e-5 at "
            .. "dp %d (%g)"):format(np, max_param_diff(rows, base)))
      end
   end
end

-- a mixture of experts: dp 2 x accum 1 against dp 1 x accum 2 (each micro-batch routes and
-- balances its own tokens, as each rank's does), and ZeRO-3, where every rank acquires every
-- expert in order (collectively) whether it received tokens or not
local moe = "--experts 24 --batch 1 --steps 4"
local moe1 = run("moe-dp1", 1, moe .. " --accum 2")
local moe2 = run("moe-dp2", 2, moe .. " --accum 1")
expect(moe1.losses[4] < moe1.losses[1], "the mixture of experts' loss goes down")
expect(max_param_diff(moe1, moe2) < 1e-5, ("mixture of experts: dp 2 and dp 1 within 1e-5 (%g)")
   :format(max_param_diff(moe1, moe2)))
local moe3 = run("moe-z3-dp2", 2, moe .. " --accum 1 --zero 3")
expect(max_param_diff(moe3, moe2) < 1e-5, ("mixture of experts: ZeRO-3 and ZeRO-1 within 1e-5 at "
   .. "dp 2 (%g)"):format(max_param_diff(moe3, moe2)))

-- expert parallelism: ep 2 on 2 ranks and ep 2 x expert-DP 2 on 4 (oversubscribed)
-- against ep 1 on one rank over the same global batch (dropless routing, so the same tokens
-- reach the same experts): losses and every parameter, compared by name (train_run gathers
-- every expert to rank 0), within 1e-5; train_run also checks the dense parameters bit for bit
-- across the world and the experts across each expert-DP group
local ep = "--experts 8 --batch 1 --steps 5 --ep "
local ep1 = run("ep1", 1, ep .. "1 --accum 2")
local ep2 = run("ep2", 2, ep .. "2 --accum 1")
expect(max_loss_diff(ep1, ep2) < 1e-5, ("ep 2 and ep 1 losses within 1e-5 (%g)")
   :format(max_loss_diff(ep1, ep2)))
expect(#ep1.params == #ep2.params and max_param_diff(ep1, ep2) < 1e-5,
   ("ep 2 and ep 1 parameters within 1e-5 (%g)"):format(max_param_diff(ep1, ep2)))
local ep1x4 = run("ep1x4", 1, ep .. "1 --accum 4")
local ep22 = run("ep2x2", 4, ep .. "2 --accum 1")
expect(max_loss_diff(ep1x4, ep22) < 1e-5, ("ep 2 x expert-DP 2 and ep 1 losses within 1e-5 (%g)")
   :format(max_loss_diff(ep1x4, ep22)))
expect(#ep1x4.params == #ep22.params and max_param_diff(ep1x4, ep22) < 1e-5,
   ("ep 2 x expert-DP 2 and ep 1 parameters within 1e-5 (%g)")
   :format(max_param_diff(ep1x4, ep22)))
local ep22z3 = run("ep2x2-z3", 4, ep .. "2 --accum 1 --zero 3")
expect(max_param_diff(ep22z3, ep22) < 1e-5, ("ep 2 x expert-DP 2: ZeRO-3 and ZeRO-1 within 1e-5 "
   .. "(%g)"):format(max_param_diff(ep22z3, ep22)))
-- bad configs, refused with their numbers
local function refused(np, args, words)
   local cmd = ("mpirun --oversubscribe -np %d -x OPENBLAS_NUM_THREADS=1 bin/lwopt run "
      .. "tests/lua/train_run.lua --out %s-bad %s 2>&1"):format(np, tmp, args)
   local p = io.popen(cmd)
   local text = p:read("*a")
   p:close()
   expect(text:find(words, 1, true) ~= nil, ("refused: %s (%q)"):format(words, text:sub(1, 300)))
end
refused(2, "--experts 8 --ep 4", "ep 4 does not divide the 2 ranks")
refused(3, "--experts 8 --ep 3", "ep 3 does not divide the 8 experts")

-- packed at dp 4 (oversubscribed), ZeRO-1, 2 and 3, against replicated data parallelism
local dp4 = "--batch 2 --accum 1 --bucket 8192 --layers 4 --steps 2"
local rep4 = run("rep-dp4", 4, dp4 .. " --mode replicated")
for zero = 1, 3 do
   local p4 = run("packed-z" .. zero .. "-dp4", 4, ("%s --layout packed --zero %d"):format(dp4, zero))
   expect(max_param_diff(p4, rep4) < 1e-5, ("packed ZeRO-%d and replicated within 1e-5 at dp 4 "
      .. "(%g)"):format(zero, max_param_diff(p4, rep4)))
   if zero >= 2 then -- a block counts the largest shard any rank gets, not the group / dp
      expect(p4.memory.block == p4.memory.layoutblock, ("packed ZeRO-%d at dp 4: a block is %d "
         .. "bytes, the layout's %d"):format(zero, p4.memory.block, p4.memory.layoutblock))
   end
end

-- Memory at dp 4, ZeRO-3: parameters + gradients held at the peak (shards, gathered groups and
-- whole-gradient groups with their reduce-scatter shard) <= the padded model's parameters and
-- gradients / 4 + two of the largest bucket group's
local z4 = run("z3-dp4", 4, "--batch 2 --accum 1 --zero 3 --bucket 8192 --layers 8 --steps 2")
local m = z4.memory
expect(m.arrays == m.model / 4, ("ZeRO-3 at dp 4 keeps a quarter of the model in shards (%d of %d)")
   :format(m.arrays, m.model))
expect(m.budget == 2 * 2 * m.block, "the budget is two groups' parameters and gradients")
expect(m.peak <= m.model / 4 + m.budget, ("peak %d <= model / 4 + two largest groups = %d")
   :format(m.peak, m.model / 4 + m.budget))
expect(m.peak > m.arrays, "groups were gathered")
expect(m.peak < m.model, ("and that is less than ZeRO-1 holds (%d < %d)"):format(m.peak, m.model))
-- each group gathered at most twice a step (forward, backward) plus the tied embedding's reuse
-- by the LM head, and once per evaluation pass (one, at the last step): prefetches must not
-- fetch groups the pass has left behind
local most = 2 * (2 * m.groups + 1) + (m.groups + 1)
expect(m.gathers <= most, ("%d gathers in 2 steps and an evaluation, at most %d"):format(m.gathers,
   most))

tally.finish("train_consistency")
