-- tp_consistency.lua: tensor parallelism against tp 1 over the same global batch
-- (tests/lua/tp_run.lua, a 2-layer GPT of 6 heads x 48 on bytes: the vocabulary of 256 padded
-- to 258 rows at tp 3). Each run starts from the same full parameters; the first step's loss and
-- the gradients of every full tensor (gathered by name over the TP group, the padding trimmed),
-- the losses of 5 AdamW steps and the parameters after them must agree within 1e-5 with the tp
-- 1 run's:
--   tp 2 (2 ranks) and tp 3 (3 ranks, oversubscribed), tied and untied LM head, with biases;
--   tp 2 x dp 2 (4 ranks, oversubscribed): the gradients (data-parallel replicated mode, whole
--   reduced gradients on every rank), then training at ZeRO-1 and ZeRO-3;
-- checkpoints: 2 steps saved at tp 3, 1 or 2, resumed at tp 1, 3, or tp 1 x dp 2, continue the
-- tp 1 run within 1e-5 (the full tensors by name, the padding trimmed and restored);
-- Muon with the QKV split: --muon-tp-mode duplicated and distributed at tp 2 and 3 and on the tp 2
-- x dp 2 grid (ZeRO-1, 2, 3, legacy) within 1e-5 of tp 1, blockwise different from it;
-- and tp_run checks in every run that replicated tensors are bit-identical across the world and
-- TP shards across their DP group. Clipping is on (0.5 in tp_run): the TP-aware gradient norm
-- decides every TP rank's scale.
-- Prints "N passed, M failed".
-- Usage: bin/lwopt run tests/lua/tp_consistency.lua (from the repo root; needs data/kjv.txt)
local ffi = require("ffi")

local tmp = os.tmpname()
os.remove(tmp)
local tally = dofile("tests/lua/tally.lua")
local expect = tally.expect

-- The tensors of a tp_run output file, by name (strings of floats).
local function tensors(path)
   local text = tally.slurp(path)
   if text == nil then return nil end
   local out, at = {}, 1
   while at <= #text do
      local name, len, body = text:match("^([^\n]*)\n(%d+)\n()", at)
      out[name] = text:sub(body, body + tonumber(len) - 1)
      at = body + tonumber(len)
   end
   return out
end

local function run(name, np, args)
   local out = tmp .. "-" .. name
   local launcher = np > 1 and ("mpirun --oversubscribe -np " .. np .. " -x OPENBLAS_NUM_THREADS=1 ")
      or ""
   local cmd = launcher .. "bin/lwopt run tests/lua/tp_run.lua --out " .. out .. " " .. args
   if not tally.sh(cmd) then error("failed: " .. cmd) end
   local losses = {}
   for line in io.lines(out .. ".losses") do losses[#losses + 1] = tonumber(line) end
   local r = { losses = losses, params = tensors(out .. ".params"),
      grads = tensors(out .. ".grads") }
   for _, ext in ipairs({ ".losses", ".params", ".grads" }) do os.remove(out .. ext) end
   return r
end

-- The largest difference between two lists of numbers.
local function loss_diff(a, b)
   if #a.losses ~= #b.losses then return math.huge end
   local m = 0
   for i = 1, #a.losses do m = math.max(m, math.abs(a.losses[i] - b.losses[i])) end
   return m
end

-- The largest element difference between two sets of tensors by name (huge when the names or
-- sizes differ), and the tensor where it is.
local function tensor_diff(a, b)
   local m, at = 0, nil
   for name, x in pairs(a) do
      local y = b[name]
      if y == nil or #y ~= #x then return math.huge, name end
      local p, q = ffi.cast("const float *", x), ffi.cast("const float *", y)
      for i = 0, #x / 4 - 1 do
         local d = math.abs(p[i] - q[i])
         if not (d <= m) then m, at = d, name end
      end
   end
   for name in pairs(b) do
      if a[name] == nil then return math.huge, name end
   end
   return m, at
end

local function compare(what, ref, got, with_grads)
   local d = loss_diff(ref, got)
   expect(d < 1e-5, ("%s: losses within 1e-5 of tp 1 (%g)"):format(what, d))
   local g, gwhere = 0, nil
   if with_grads then
      g, gwhere = tensor_diff(ref.grads, got.grads)
      expect(g < 1e-5, ("%s: first-step gradients of the full tensors within 1e-5 of tp 1 (%g, "
         .. "%s)"):format(what, g, tostring(gwhere)))
   end
   local p, where = tensor_diff(ref.params, got.params)
   expect(p < 1e-5, ("%s: parameters after the steps within 1e-5 of tp 1 (%g, %s)")
      :format(what, p, tostring(where)))
   print(("%-44s losses %.1e  gradients %s  parameters %.1e"):format(what, d,
      with_grads and ("%.1e"):format(g) or "-", p))
end

-- Each model, its tp 1 reference, then its TP runs. Every global batch here is 4 sequences:
-- --batch 2 x --accum 2 on one DP rank, --batch 2 x --accum 1 on two.
for _, model in ipairs({ { name = "tied, biases", args = "--bias" },
   { name = "untied", args = "--untied" } }) do
   local base = model.args .. " --optimizer adamw --grads --batch 2"
   local ref = run("tp1", 1, base .. " --tp 1 --accum 2")
   expect(ref.losses[5] < ref.losses[1], model.name .. ": the loss goes down")
   compare(model.name .. ", tp 2", ref, run("tp2", 2, base .. " --tp 2 --accum 2"), true)
   compare(model.name .. ", tp 3 (vocabulary padded to 258)", ref,
      run("tp3", 3, base .. " --tp 3 --accum 2"), true)
end

-- tp 2 x dp 2 on 4 ranks: gradients whole on every rank (replicated data parallelism), then the
-- layer-wise optimizer at ZeRO-1 and ZeRO-3 (dp sharding of the TP shards)
local ref = run("tp1-dp", 1, "--bias --grads --batch 2 --accum 2 --tp 1")
compare("tp 2 x dp 2, replicated", ref,
   run("tp2dp2-rep", 4, "--bias --grads --batch 2 --tp 2 --mode replicated"), true)
for _, zero in ipairs({ 1, 3 }) do
   compare(("tp 2 x dp 2, ZeRO-%d"):format(zero), ref,
      run("tp2dp2-z" .. zero, 4, ("--bias --batch 2 --tp 2 --zero %d"):format(zero)), false)
end

-- Muon (with the QKV split, Newton-Schulz in fp32): duplicated and distributed orthogonalise the
-- full matrices, so they train as at tp 1 within 1e-5, at tp 2 and 3 and on a tp 2 x dp 2 grid
-- at every ZeRO level, layer-wise and legacy; blockwise orthogonalises each shard alone, a
-- different optimizer: it must differ from tp 1 (tests/test_muon_tp.c checks it against a
-- per-shard reference)
local muon = "--untied --bias --optimizer muon --batch 2 "
local muon_ref = run("muon-tp1", 1, muon .. "--tp 1 --accum 2")
expect(muon_ref.losses[5] < muon_ref.losses[1], "Muon: the loss goes down")
for _, case in ipairs({ { 2, "duplicated" }, { 3, "duplicated" }, { 2, "distributed" },
   { 3, "distributed" } }) do
   local np, mode = case[1], case[2]
   compare(("Muon %s, tp %d"):format(mode, np), muon_ref,
      run("muon-" .. mode .. np, np, muon .. ("--tp %d --accum 2 --tp-mode %s"):format(np, mode)),
      false)
end
for _, grid in ipairs({ "--zero 1", "--zero 2", "--zero 3", "--zero 3 --tp-mode distributed",
   "--mode legacy", "--mode legacy --tp-mode distributed" }) do
   compare("Muon, tp 2 x dp 2, " .. grid, muon_ref,
      run("muon-grid", 4, muon .. "--tp 2 --accum 1 " .. grid), false)
end
do
   local blockwise = run("muon-blockwise", 2, muon .. "--tp 2 --accum 2 --tp-mode blockwise")
   local d = tensor_diff(muon_ref.params, blockwise.params)
   expect(d > 1e-4 and d < 1, ("Muon blockwise at tp 2 trains, and differs from tp 1 (max "
      .. "parameter difference %g)"):format(d))
end

-- checkpoints keyed by the tp 1 model's tensors (the vocabulary's padding trimmed): 2 steps at
-- one TP size, saved, then 2 more at another (and dp 2) continue the 4-step tp 1 run within 1e-5
do
   local base = "--untied --bias --optimizer adamw --batch 2 "
   local ref = run("ck-ref", 1, base .. "--tp 1 --accum 2 --steps 4")
   for _, case in ipairs({ { 3, "--tp 3 --accum 2", 1, "--tp 1 --accum 2" },
      { 1, "--tp 1 --accum 2", 3, "--tp 3 --accum 2" },
      { 2, "--tp 2 --accum 2", 2, "--tp 1 --accum 1" } }) do
      local dir = tmp .. "-ck"
      run("ck-first", case[1], base .. case[2] .. " --steps 2 --save " .. dir)
      local got = run("ck-then", case[3], base .. case[4] .. " --steps 4 --load " .. dir)
      tally.sh("rm -rf " .. dir)
      -- the resumed run's losses are steps 3 and 4 and the validation loss
      local tail = { losses = { ref.losses[3], ref.losses[4], ref.losses[5] }, params = ref.params }
      compare(("saved at %s, resumed at %s (%d ranks)"):format(case[2]:match("%-%-tp %d"),
         case[4]:match("%-%-tp %d"), case[3]), tail, got, false)
   end
end

tally.finish("tp_consistency")
