-- ckpt_consistency.lua: checkpoints through recipes/gpt_small.lua (tiny preset, 6 steps):
-- a run stopped after step 3 and resumed at the same rank count continues bit-identically
-- (losses and final parameters); resumed at another rank count (resharding 3->2, 2->3, 1->2,
-- 2->1), layout algorithm or ZeRO level (1, 2, 3, row-sharded, either way) it continues with the
-- uninterrupted run's losses within 1e-5. Also: a job killed between checkpoints resumes and
-- ends bit-identical, and a save killed at each point of the protocol leaves the previous
-- checkpoint loadable with `latest` on it (the faults injected by tests/lua/with_faults.lua);
-- resumed at another rank count without --accum the global batch is kept; a damaged newest
-- checkpoint, or another run's checkpoints with latest gone, do not stop the run from ending
-- as if never stopped; a mixture of experts saved at ep 2 resumes at ep 1 and back; bf16
-- parameters resume bit-identically, and across dtypes (fp32 <-> bf16), rank counts, layouts,
-- ZeRO levels and --tp with their exact fp32 weights; NorMuon's state resumes at other rank
-- counts.
-- Prints "N passed, M failed". Usage: bin/lwopt run tests/lua/ckpt_consistency.lua
local tmp = os.tmpname()
os.remove(tmp)
local tally = dofile("tests/lua/tally.lua")
local expect = tally.expect

local sh = tally.sh

-- Runs the recipe on np ranks with the global batch fixed at 12 sequences; its output goes to
-- the file out, if given. env: a fault to inject ("LWOPT_KILL_AFTER_STEP=N" or
-- "LWOPT_CKPT_CRASH=<point>"), through tests/lua/with_faults.lua, which installs it in the
-- library's hook points.
local function recipe(np, args, env, out)
   local accum = ({ [1] = 6, [2] = 3, [3] = 2 })[np]
   local launcher = np > 1 and ("mpirun --oversubscribe -np " .. np .. " -x OPENBLAS_NUM_THREADS=1 "
      .. (env and ("-x " .. env:match("^([%w_]+)=") .. " ") or "")) or ""
   return sh((env and env .. " " or "") .. "timeout 300 " .. launcher
      .. "luajit " .. (env and "tests/lua/with_faults.lua " or "") .. "recipes/gpt_small.lua "
      .. "--preset tiny --steps 6 --batch 2 --accum " .. accum .. " --sample 0 --quiet " .. args
      .. " > " .. (out or "/dev/null") .. " 2>&1")
end

-- The recipe without recipe()'s --accum: launched on np ranks, its output to the file out.
local function plain(np, args, out)
   local launcher = np > 1
      and ("mpirun --oversubscribe -np %d -x OPENBLAS_NUM_THREADS=1 "):format(np) or ""
   return sh("timeout 300 " .. launcher .. "luajit recipes/gpt_small.lua --preset tiny --steps 6 "
      .. "--batch 2 --sample 0 --quiet " .. args .. " > " .. (out or "/dev/null") .. " 2>&1")
end

-- Whether path (a shell glob) names something.
local function exists(path) return sh("ls -d " .. path .. " > /dev/null 2>&1") end

local losses = tally.losses

local slurp = tally.slurp

-- The largest difference between same-named tensors of two safetensors files, and how many of
-- b's tensors a lacks (or holds with another size).
local function max_diff_by_name(a, b)
   local ffi, lib = require("ffi"), require("lwopt.C").lib
   local function open(path)
      local out = ffi.new("lw_safetensors*[1]")
      assert(lib.lw_safetensors_open(path, out) == 0, path)
      return ffi.gc(out[0], lib.lw_safetensors_free)
   end
   local function tensor(st, name)
      local i, view = ffi.new("int32_t[1]"), ffi.new("lw_tensor_view")
      if lib.lw_safetensors_find(st, name, i) ~= 0 then return nil end
      assert(lib.lw_safetensors_tensor(st, i[0], view) == 0)
      return view
   end
   local sa, sb = open(a), open(b)
   local worst, missing = 0, 0
   for k = 0, lib.lw_safetensors_count(sb) - 1 do
      local y = ffi.new("lw_tensor_view")
      assert(lib.lw_safetensors_tensor(sb, k, y) == 0)
      local x = tensor(sa, ffi.string(y.name))
      if x == nil or x.bytes ~= y.bytes then
         missing = missing + 1
      else
         local p, q = ffi.cast("const float *", x.data), ffi.cast("const float *", y.data)
         for j = 0, tonumber(y.bytes) / 4 - 1 do worst = math.max(worst, math.abs(p[j] - q[j])) end
      end
   end
   return worst, missing
end

local reference = {}
for _, np in ipairs({ 1, 2, 3 }) do
   local log = tmp .. "-ref" .. np .. ".jsonl"
   assert(recipe(np, "--log " .. log .. " --save-params " .. tmp .. "-ref" .. np .. ".st"))
   reference[np] = { losses = losses(log), params = slurp(tmp .. "-ref" .. np .. ".st") }
end

for _, pair in ipairs({ { 1, 1 }, { 2, 2 }, { 3, 3 }, { 3, 2 }, { 2, 3 }, { 1, 2 }, { 2, 1 } }) do
   local from, to = pair[1], pair[2]
   local dir, log = tmp .. "-ck" .. from .. to, tmp .. "-run" .. from .. to .. ".jsonl"
   local params = tmp .. "-p" .. from .. to .. ".st"
   assert(recipe(from, "--ckpt-dir " .. dir .. " --stop-after 3 --log " .. log))
   assert(recipe(to, "--ckpt-dir " .. dir .. " --resume --log " .. log .. " --save-params " .. params))
   local got, want = losses(log), reference[from].losses
   local worst = 0
   for i = 1, 6 do worst = math.max(worst, math.abs((got[i] or math.huge) - want[i])) end
   if from == to then
      expect(#got == 6 and worst == 0 and slurp(params) == reference[from].params,
         ("dp %d -> %d: bit-identical continuation (max loss diff %g)"):format(from, to, worst))
   else
      expect(#got == 6 and worst < 1e-5,
         ("dp %d -> %d: resharded losses within 1e-5 (max diff %g)"):format(from, to, worst))
   end
   sh("rm -rf " .. dir)
   os.remove(log)
   os.remove(params)
end

-- another layout algorithm and rank count: ownership moves, state follows by name and range
do
   local dir, log = tmp .. "-cklayout", tmp .. "-runlayout.jsonl"
   assert(recipe(2, "--ckpt-dir " .. dir .. " --stop-after 3 --log " .. log))
   assert(recipe(3, "--ckpt-dir " .. dir .. " --resume --layout size_matching --log " .. log))
   local got, want = losses(log), reference[2].losses
   local worst = 0
   for i = 1, 6 do worst = math.max(worst, math.abs((got[i] or math.huge) - want[i])) end
   expect(#got == 6 and worst < 1e-5,
      ("cost at dp 2 -> size_matching at dp 3: losses within 1e-5 (max diff %g)"):format(worst))
   sh("rm -rf " .. dir)
   os.remove(log)
end

-- another ZeRO level (and rank count): checkpoints are keyed by name whatever held what
for _, case in ipairs({ { 2, "--zero 1", 3, "--zero 3" }, { 2, "--zero 3", 1, "--zero 1" },
   { 3, "--zero 3 --shard rows", 2, "--zero 2" }, { 3, "--zero 2", 2, "--zero 3 --shard rows" },
   -- packed's unequal shards, both ways
   { 2, "--zero 1 --layout packed", 3, "--zero 3" }, { 3, "--zero 2", 2, "--zero 3 --layout packed" } }) do
   local from, from_args, to, to_args = case[1], case[2], case[3], case[4]
   local dir, log = tmp .. "-ckzero", tmp .. "-runzero.jsonl"
   assert(recipe(from, from_args .. " --ckpt-dir " .. dir .. " --stop-after 3 --log " .. log))
   assert(recipe(to, to_args .. " --ckpt-dir " .. dir .. " --resume --log " .. log))
   local got, want = losses(log), reference[from].losses
   local worst = 0
   for i = 1, 6 do worst = math.max(worst, math.abs((got[i] or math.huge) - want[i])) end
   expect(#got == 6 and worst < 1e-5, ("%s at dp %d -> %s at dp %d: losses within 1e-5 (max "
      .. "diff %g)"):format(from_args, from, to_args, to, worst))
   sh("rm -rf " .. dir)
   os.remove(log)
end

-- bf16 parameters with fp32 master weights: a bf16 run resumed continues bit-identically (the
-- master weights and state saved exactly); across rank counts and ZeRO levels within 1e-4 (the
-- sums' order flips a few bf16 roundings); a bf16 checkpoint resumed in fp32 and an fp32 one in
-- bf16 continue within the 0.01 that bf16 keeps of fp32 (dtype_consistency.lua), each saying
-- its conversion in one line
do
   local ref_log, ref_params = tmp .. "-bf16ref.jsonl", tmp .. "-bf16ref.st"
   assert(recipe(2, "--param-dtype bf16 --log " .. ref_log .. " --save-params " .. ref_params))
   local bf16 = { losses = losses(ref_log), params = slurp(ref_params) }
   local function worst_of(got, want)
      local worst = 0
      for i = 1, 6 do worst = math.max(worst, math.abs((got[i] or math.huge) - want[i])) end
      return worst
   end
   for _, case in ipairs({
      { "--param-dtype bf16", 2, "--param-dtype bf16", bf16, 0 },
      { "--param-dtype bf16", 3, "--param-dtype bf16 --zero 3", bf16, 1e-4 },
      { "--param-dtype fp32", 2, "--param-dtype bf16", reference[2], 0.01,
        "fp32 parameters -> bf16: rounded to nearest even; the checkpoint's fp32 parameters "
        .. "become the master weights" },
      { "--param-dtype bf16", 2, "--param-dtype fp32", bf16, 0.01,
        "bf16 parameters -> fp32: the checkpoint's fp32 master weights become the parameters" },
      -- and another rank count, layout and ZeRO level at once
      { "--param-dtype bf16", 3, "--param-dtype fp32 --layout packed --zero 2", bf16, 0.01,
        "bf16 parameters -> fp32: the checkpoint's fp32 master weights become the parameters" },
   }) do
      local from_args, to, to_args, want, bound, line = unpack(case)
      local dir, log = tmp .. "-ckdtype", tmp .. "-rundtype.jsonl"
      local out, params = tmp .. "-ckdtype.out", tmp .. "-ckdtype.st"
      assert(recipe(2, from_args .. " --ckpt-dir " .. dir .. " --stop-after 3 --log " .. log))
      local ok = recipe(to, to_args .. " --ckpt-dir " .. dir .. " --resume --log " .. log
         .. " --save-params " .. params, nil, out)
      local said = slurp(out) or ""
      local worst = worst_of(losses(log), want.losses)
      local what = ("%s at dp 2 -> %s at dp %d"):format(from_args, to_args, to)
      if bound == 0 then
         expect(ok and worst == 0 and slurp(params) == want.params,
            ("%s: bit-identical continuation (max loss diff %g)"):format(what, worst))
      else
         expect(ok and worst <= bound, ("%s: losses within %g (max diff %g)"):format(what, bound,
            worst))
      end
      if line then
         expect(said:find("resume: " .. line, 1, true) ~= nil, what .. " says: " .. line)
      else
         expect(not said:find("parameters ->", 1, true), what .. " converts nothing")
      end
      sh("rm -rf " .. dir)
      os.remove(log)
      os.remove(out)
      os.remove(params)
   end
   os.remove(ref_log)
   os.remove(ref_params)
end

-- bf16 parameters saved under tensor parallelism (--tp 2: each rank's master weights are its
-- shards') resumed in fp32 without it, and fp32 back into bf16 at --tp 2
do
   local dir, log, ref = tmp .. "-cktpdtype", tmp .. "-tpdtype.jsonl", tmp .. "-tpref.jsonl"
   local out = tmp .. "-tpdtype.out"
   assert(plain(2, "--tp 2 --accum 2 --param-dtype bf16 --log " .. ref))
   for _, case in ipairs({ { "--param-dtype bf16 --tp 2 --accum 2", "--param-dtype fp32",
      "bf16 parameters -> fp32" }, { "--param-dtype fp32", "--param-dtype bf16 --tp 2",
      "fp32 parameters -> bf16" } }) do
      local from, to, line = case[1], case[2], case[3]
      assert(plain(2, from .. " --ckpt-dir " .. dir .. " --stop-after 3 --log " .. log))
      local ok = plain(2, to .. " --ckpt-dir " .. dir .. " --resume --log " .. log, out)
      local got, want = losses(log), losses(ref)
      local worst = 0
      for i = 1, 6 do worst = math.max(worst, math.abs((got[i] or math.huge) - want[i])) end
      expect(ok and worst <= 0.02, ("%s -> %s: losses within 0.02 of bf16 at tp 2 (max diff %g)")
         :format(from, to, worst))
      expect((slurp(out) or ""):find("resume: " .. line, 1, true) ~= nil, from .. " -> " .. to
         .. " says: " .. line)
      sh("rm -rf " .. dir)
      os.remove(log)
   end
   os.remove(ref)
   os.remove(out)
end

-- killed during training, between checkpoints: resuming loses only the steps since the last
-- one, and the run ends bit-identical to the uninterrupted one
do
   local dir, log = tmp .. "-killed", tmp .. "-killed.jsonl"
   local killed = recipe(2, "--ckpt-dir " .. dir .. " --ckpt-every 2 --log " .. log,
      "LWOPT_KILL_AFTER_STEP=5")
   expect(not killed, "the job killed after step 5 ends with an error")
   local latest = (slurp(dir .. "/latest") or ""):gsub("%s+$", "")
   expect(latest == "step-000000004", "after the kill latest names step 4 (" .. latest .. ")")
   local params = tmp .. "-killed.st"
   expect(recipe(2, "--ckpt-dir " .. dir .. " --resume --save-params " .. params),
      "the killed run resumes")
   expect(slurp(params) == reference[2].params, "and ends bit-identical to the uninterrupted run")
   sh("rm -rf " .. dir)
   os.remove(log)
   os.remove(params)
end

-- a save killed at each point leaves the previous checkpoint with latest on it; what the save
-- of step 5 left shows where it was stopped
local left = {
   optim = { "step-000000005.tmp/optim-r0000?.safetensors" }, -- the first rank there ends it
   model = { "step-000000005.tmp/model.safetensors" },
   manifest = { "step-000000005.tmp/manifest.json" },
   rename = { "step-000000005/manifest.json" },
}
local absent = {
   optim = "step-000000005.tmp/model.safetensors", model = "step-000000005.tmp/manifest.json",
   manifest = "step-000000005", rename = "step-000000005.tmp",
}
for _, point in ipairs({ "optim", "model", "manifest", "rename" }) do
   local dir = tmp .. "-crash-" .. point
   local out = tmp .. "-crash-" .. point .. ".out"
   assert(recipe(2, "--ckpt-dir " .. dir .. " --stop-after 3"))
   local killed = recipe(2, "--ckpt-dir " .. dir .. " --resume --stop-after 5",
      "LWOPT_CKPT_CRASH=" .. point, out)
   expect(not killed, "the save killed at '" .. point .. "' ends the job with an error")
   expect((slurp(out) or ""):find("checkpoint: crashing at '" .. point .. "'", 1, true),
      "the fault at '" .. point .. "' was the one that ended the job")
   for _, path in ipairs(left[point]) do
      expect(exists(dir .. "/" .. path), "a save killed at '" .. point .. "' left " .. path)
   end
   expect(not exists(dir .. "/" .. absent[point]),
      "a save killed at '" .. point .. "' got no further: no " .. absent[point])
   os.remove(out)
   local latest = (slurp(dir .. "/latest") or ""):gsub("%s+$", "")
   expect(latest == "step-000000003", "after a kill at '" .. point .. "' latest still names step 3 ("
      .. latest .. ")")
   expect(recipe(2, "--ckpt-dir " .. dir .. " --resume"),
      "after a kill at '" .. point .. "' the run resumes from step 3")
   sh("rm -rf " .. dir)
end

-- resumed at another rank count without --accum, the run keeps the checkpoint's global batch:
-- --accum changes (said in one line) and the losses are the uninterrupted run's
do
   local dir, log, out = tmp .. "-ckbatch", tmp .. "-runbatch.jsonl", tmp .. "-batch.out"
   assert(plain(2, "--accum 3 --ckpt-dir " .. dir .. " --stop-after 3 --log " .. log))
   expect(plain(1, "--ckpt-dir " .. dir .. " --resume --log " .. log, out), "2 -> 1 rank resumes")
   local said = slurp(out) or ""
   expect(said:find("resume: --accum 6 (was 3) keeps the checkpoint's global batch of 12 "
      .. "sequences at 1 rank\nresume: settings changed since the checkpoint: 1 rank (was 2)\n", 1,
      true), "2 -> 1 rank: the --accum that keeps the global batch is said in one line: " .. said)
   local got, want = losses(log), reference[2].losses
   local worst = 0
   for i = 1, 6 do worst = math.max(worst, math.abs((got[i] or math.huge) - want[i])) end
   expect(#got == 6 and worst < 1e-5, ("2 -> 1 rank without --accum: the global batch kept, "
      .. "losses within 1e-5 (max diff %g)"):format(worst))
   sh("rm -rf " .. dir)
   os.remove(log)
   os.remove(out)
end

-- a damaged newest checkpoint (one rank's optimizer file truncated) is passed over for the
-- newest whole one of the run, which ends bit-identical to the uninterrupted run; with latest
-- gone and another run's later checkpoints in the directory, the run of the newest manifest
-- is continued, not the other one
do
   local dir, out, params = tmp .. "-ckdamaged", tmp .. "-damaged.out", tmp .. "-damaged.st"
   assert(recipe(2, "--ckpt-dir " .. dir .. " --ckpt-every 1 --stop-after 4"))
   sh("truncate -s 100 " .. dir .. "/step-000000004/optim-r00001.safetensors")
   expect(recipe(2, "--ckpt-dir " .. dir .. " --resume --save-params " .. params, nil, out),
      "a run whose newest checkpoint is damaged resumes")
   expect((slurp(out) or ""):find("which is damaged (checkpoint.load: " .. dir
      .. "/step-000000004/optim-r00001.safetensors has 100 bytes", 1, true)
      and (slurp(out) or ""):find("; using step-000000003, the newest whole checkpoint of its "
      .. "run", 1, true), "the damaged checkpoint is named, and the one taken instead")
   expect(slurp(params) == reference[2].params, "and ends bit-identical to the uninterrupted run")
   sh("rm -rf " .. dir)
   assert(recipe(2, "--ckpt-dir " .. dir .. " --ckpt-every 1 --seed 7"))
   assert(recipe(2, "--ckpt-dir " .. dir .. " --ckpt-every 1 --stop-after 3 --overwrite"))
   os.remove(dir .. "/latest")
   expect(recipe(2, "--ckpt-dir " .. dir .. " --resume --save-params " .. params, nil, out),
      "without latest, the run resumes beside another run's checkpoints")
   expect((slurp(out) or ""):find("using step-000000003, the newest whole checkpoint of the run "
      .. "of the newest manifest", 1, true) and (slurp(out) or ""):find("passed over, another "
      .. "run's: step-000000004, step-000000005, step-000000006 of run", 1, true),
      "it continues its own run and names the other's checkpoints: " .. (slurp(out) or ""))
   expect(slurp(params) == reference[2].params, "and ends bit-identical to its uninterrupted run")
   sh("rm -rf " .. dir)
   os.remove(out)
   os.remove(params)
end

-- expert parallelism: a mixture of experts saved at ep 2 (2 ranks) resumes at ep 1 (1 rank) and
-- back at ep 2 with ZeRO-3, each expert's weights and state found by its global name, within
-- 1e-5 of the uninterrupted run; the saved model holds every expert, whichever rank trained it
do
   local moe, dir, log = "--n-expert 4 ", tmp .. "-ckep", tmp .. "-runep.jsonl"
   local ref_log, ref_params, params = tmp .. "-refep.jsonl", tmp .. "-refep.st", tmp .. "-pep.st"
   assert(recipe(2, moe .. "--log " .. ref_log .. " --save-params " .. ref_params))
   assert(recipe(2, moe .. "--ep 2 --ckpt-dir " .. dir .. " --stop-after 2 --log " .. log))
   local saved = slurp(dir .. "/step-000000002/manifest.json") or ""
   local experts = 0
   for _ in saved:gmatch('"expert": true') do experts = experts + 1 end
   expect(experts == 4 * 4 * 2, ("the ep 2 checkpoint lists the 2 matrices of every expert, 4 "
      .. "layers x 4 (%d)"):format(experts))
   assert(recipe(1, moe .. "--ckpt-dir " .. dir .. " --resume --stop-after 4 --log " .. log))
   assert(recipe(2, moe .. "--ep 2 --zero 3 --ckpt-dir " .. dir .. " --resume --log " .. log
      .. " --save-params " .. params))
   local got, want = losses(log), losses(ref_log)
   local worst = 0
   for i = 1, 6 do worst = math.max(worst, math.abs((got[i] or math.huge) - want[i])) end
   expect(#got == 6 and worst < 1e-5, ("experts at ep 2 -> ep 1 -> ep 2 (ZeRO-3): losses within "
      .. "1e-5 (max diff %g)"):format(worst))
   local worst_param, missing = max_diff_by_name(params, ref_params)
   expect(missing == 0 and worst_param < 1e-5, ("the parameters, every expert by name, within "
      .. "1e-5 (max diff %g, %d missing)"):format(worst_param, missing))
   sh("rm -rf " .. dir)
   for _, f in ipairs({ log, ref_log, ref_params, params }) do os.remove(f) end
end

-- NorMuon (--optimizer normuon): its per-line v, held whole by each matrix's owner, saved at dp 2
-- and resumed at dp 3 and dp 1 (ZeRO-3), within 1e-5 of the uninterrupted run at dp 2
do
   local nor, ref_log = "--optimizer normuon ", tmp .. "-refnor.jsonl"
   assert(recipe(2, nor .. "--log " .. ref_log))
   for _, case in ipairs({ { 3, "" }, { 1, "--zero 3 " } }) do
      local dir, log = tmp .. "-cknor", tmp .. "-runnor.jsonl"
      assert(recipe(2, nor .. "--ckpt-dir " .. dir .. " --stop-after 3 --log " .. log))
      assert(recipe(case[1], nor .. case[2] .. "--ckpt-dir " .. dir .. " --resume --log " .. log))
      local got, want = losses(log), losses(ref_log)
      local worst = 0
      for i = 1, 6 do worst = math.max(worst, math.abs((got[i] or math.huge) - want[i])) end
      expect(#got == 6 and worst < 1e-5, ("normuon at dp 2 -> %sdp %d: losses within 1e-5 (max "
         .. "diff %g)"):format(case[2], case[1], worst))
      sh("rm -rf " .. dir)
      os.remove(log)
   end
   os.remove(ref_log)
end

for _, np in ipairs({ 1, 2, 3 }) do
   os.remove(tmp .. "-ref" .. np .. ".jsonl")
   os.remove(tmp .. "-ref" .. np .. ".st")
end
tally.finish("ckpt_consistency")
