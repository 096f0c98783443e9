-- recipe_work_spec.lua: recipes/gpt_small.lua never loses a user's work: checkpoint pruning and
-- overwrite rules, what resume says and refuses, every output checked before the first step,
-- a diverging run stopped with its outputs written, and end-of-run steps independent of each
-- other. One rank, tiny preset (the MPI cases are in comm_spec and tests/lua/).
local helpers = require("helpers")
local lw = require("lwopt")

local root = assert(io.popen("pwd")):read("*l")
local recipe = "luajit " .. root .. "/recipes/gpt_small.lua --preset tiny --sample 0 --quiet "

local function run(args) return helpers.sh("cd /tmp && " .. recipe .. args) end
local function listing(dir) return (helpers.sh("ls " .. dir):gsub("\n", " ")) end
local function latest(dir) return (helpers.sh("cat " .. dir .. "/latest"):gsub("%s", "")) end
local function exists(path) return select(2, helpers.sh("test -e " .. path)) == 0 end

describe("recipes/gpt_small.lua keeps the user's work", function()
   local dir, file
   before_each(function()
      dir = helpers.fresh_path()
      file = dir .. ".out"
   end)
   after_each(function() helpers.sh("rm -rf " .. dir .. " " .. dir .. ".*") end)

   it("refuses a new run over another run's checkpoints; --overwrite prunes only its own", function()
      local out, status = run("--steps 20 --ckpt-every 5 --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      out, status = run("--steps 6 --ckpt-every 2 --ckpt-dir " .. dir)
      assert.equal(1, status)
      assert.equal("--ckpt-dir " .. dir .. " already holds checkpoints (3 checkpoints, the newest "
         .. "step-000000020): add --resume to continue from them, --overwrite to start a new run "
         .. "over them, or choose another directory\n", out)
      assert.equal("latest step-000000010 step-000000015 step-000000020 ", listing(dir))
      out, status = run("--steps 8 --ckpt-every 2 --keep 2 --overwrite --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      assert.equal("latest step-000000006 step-000000008 step-000000010 step-000000015 "
         .. "step-000000020 ", listing(dir))
      assert.equal("step-000000008", latest(dir))
   end)

   it("keeps the checkpoint a rolled-back run resumed from", function()
      assert.equal(0, select(2, run("--steps 20 --ckpt-every 5 --ckpt-dir " .. dir)))
      helpers.sh("echo step-000000010 > " .. dir .. "/latest")
      local out, status = run("--steps 20 --ckpt-every 2 --stop-after 16 --resume --ckpt-dir "
         .. dir)
      assert.equal(0, status, out)
      assert.matches("resumed from " .. dir .. "/step-000000010: step 10", out, 1, true)
      -- the newest 3 at or before step 16 stay (14, 15, 16), the one resumed from (10) too; 20
      -- is the abandoned future, later than the step written
      assert.equal("latest step-000000010 step-000000014 step-000000015 step-000000016 "
         .. "step-000000020 ", listing(dir))
      assert.equal("step-000000016", latest(dir))
   end)

   it("says what it resumed, or that there was nothing and where it looked", function()
      local out, status = run("--steps 2 --resume --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      assert.matches("nothing to resume: " .. dir .. " did not exist (it was created for this "
         .. "run's checkpoints); starting at step 1", out, 1, true)
      helpers.sh("rm -rf " .. dir .. " && mkdir " .. dir)
      out = run("--steps 4 --ckpt-every 2 --resume --ckpt-dir " .. dir)
      assert.matches("nothing to resume: " .. dir .. " holds no checkpoint; starting at step 1",
         out, 1, true)
      os.remove(dir .. "/latest")
      out, status = run("--steps 6 --resume --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      assert.matches("resume: " .. dir .. "/latest is missing; using step-000000004, the newest "
         .. "whole checkpoint of the run of the newest manifest (run ", out, 1, true)
      assert.matches("\nresumed from " .. dir .. "/step-000000004: step 4, saved on 1 rank", out,
         1, true)
   end)

   it("takes only its run's checkpoints when latest is missing, and says whose it passed over",
      function()
      assert.equal(0, select(2, run("--steps 20 --ckpt-every 10 --ckpt-dir " .. dir)))
      assert.equal(0, select(2, run("--steps 8 --ckpt-every 4 --overwrite --ckpt-dir " .. dir)))
      local runs = {}
      for _, c in ipairs(lw.checkpoint.list(dir)) do runs[c.step] = c.manifest.run_id end
      assert.are_not.equal(runs[8], runs[20])
      os.remove(dir .. "/latest")
      local out, status = run("--steps 12 --resume --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      assert.matches(("resume: %s/latest is missing; using step-000000008, the newest whole "
         .. "checkpoint of the run of the newest manifest (run %s); passed over, another run's: "
         .. "step-000000010, step-000000020 of run %s\nresumed from %s/step-000000008: step 8")
         :format(dir, runs[8], runs[20], dir), out, 1, true)
      -- with every checkpoint of that run damaged, none of the other run's is taken
      os.remove(dir .. "/latest")
      for _, step in ipairs({ 4, 8, 12 }) do
         helpers.sh(("truncate -s 1000 %s/step-%09d/model.safetensors"):format(dir, step))
      end
      out, status = run("--steps 12 --resume --ckpt-dir " .. dir)
      assert.equal(1, status, out)
      assert.matches(("checkpoint: %s/latest is missing, and the run of the newest manifest (run "
         .. "%s) has no other whole checkpoint in %s; passed over, another run's: "
         .. "step-000000010, step-000000020 of run %s (point %s/latest at a checkpoint to resume "
         .. "it)"):format(dir, runs[8], dir, runs[20], dir), out, 1, true)
   end)

   it("falls back past a damaged newest checkpoint to the newest whole one of its run, unless "
      .. "--resume strict", function()
      assert.equal(0, select(2, run("--steps 6 --ckpt-every 2 --ckpt-dir " .. dir)))
      local model = dir .. "/step-000000006/model.safetensors"
      local bytes = helpers.sh("stat -c %s " .. model):gsub("%s", "")
      helpers.sh("truncate -s 100000 " .. model)
      local damaged = ("%s/latest names step-000000006, which is damaged (checkpoint.load: %s has "
         .. "100000 bytes, the manifest says %s (truncated?))"):format(dir, model, bytes)
      local out, status = run("--steps 8 --resume strict --ckpt-dir " .. dir)
      assert.equal(1, status, out)
      assert.equal("checkpoint: " .. damaged .. "; a strict resume takes only the checkpoint "
         .. "latest names\n", out)
      helpers.sh("truncate -s 100000 " .. dir .. "/step-000000004/optim-r00000.safetensors")
      out, status = run("--steps 8 --resume --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      local id = lw.checkpoint.list(dir)[1].manifest.run_id
      assert.matches(("resume: %s; using step-000000002, the newest whole checkpoint of its run "
         .. "(run %s); also damaged: step-000000004\nresumed from %s/step-000000002: step 2")
         :format(damaged, id, dir), out, 1, true)
   end)

   it("refuses a checkpoint of another model shape and notes changed settings", function()
      assert.equal(0, select(2, run("--steps 4 --stop-after 2 --ckpt-dir " .. dir)))
      local out, status = run("--steps 4 --seq 64 --resume --ckpt-dir " .. dir)
      assert.equal(1, status)
      assert.equal("--resume: this run has --seq 64, but the checkpoint was trained with --seq "
         .. "32: " .. dir .. "/step-000000002 cannot continue it (resume with the checkpoint's "
         .. "setting, or start a new run in another --ckpt-dir)\n", out)
      out, status = run("--steps 4 --preset small --resume --ckpt-dir " .. dir)
      assert.equal(1, status)
      assert.matches("this run has --preset small (6 layers x 256, 8 heads), but the "
         .. "checkpoint's model is --preset tiny (4 layers x 64, 4 heads)", out, 1, true)
      out, status = run("--steps 4 --optimizer adamw --resume --ckpt-dir " .. dir)
      assert.equal(1, status)
      assert.matches("--optimizer adamw, but the checkpoint was trained with --optimizer muon",
         out, 1, true)
      out, status = run("--steps 5 --batch 4 --lr 0.001 --resume --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      assert.matches("resume: settings changed since the checkpoint: --batch 4 (was 8), "
         .. "--lr 0.001 (was 0.003), --steps 5 (was 4)", out, 1, true)
   end)

   it("keeps the checkpoint's global batch when --batch changes, and refuses when it cannot",
      function()
      assert.equal(0, select(2, run("--steps 6 --stop-after 2 --batch 3 --accum 2 --ckpt-dir "
         .. dir)))
      local out, status = run("--steps 6 --stop-after 3 --batch 2 --resume --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      assert.matches("resume: --accum 3 (was 2) keeps the checkpoint's global batch of 6 "
         .. "sequences at 1 rank\nresume: settings changed since the checkpoint: --batch 2 (was "
         .. "3)\n", out, 1, true)
      out, status = run("--steps 6 --batch 4 --resume --ckpt-dir " .. dir)
      assert.equal(1, status, out)
      assert.equal("--resume: " .. dir .. "/step-000000003 was trained with a global batch of 6 "
         .. "sequences, which --batch 4 on 1 rank cannot keep (6 is not a multiple of 4): give "
         .. "--batch and --accum that make it, or a new one with --global-batch\n", out)
      out, status = run("--steps 6 --batch 4 --global-batch 8 --resume --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      assert.matches("resume: settings changed since the checkpoint: --batch 4 (was 2), --accum 2 "
         .. "(was 3), --global-batch 8 (was 6)", out, 1, true)
   end)

   it("takes --global-batch as the sequences of a step, and refuses one the ranks cannot split",
      function()
      local out, status = helpers.sh("cd /tmp && " .. recipe:gsub("%-%-quiet ", "")
         .. "--steps 1 --batch 4 --global-batch 12")
      assert.equal(0, status, out)
      assert.matches("on 1 rank, global batch 12 x 32 bytes", out, 1, true)
      for _, case in ipairs({
         { "--batch 4 --global-batch 10", "--global-batch 10 is not a multiple of --batch 4 x 1 "
           .. "rank (4): a step's sequences split evenly over the ranks and micro-steps" },
         { "--batch 4 --global-batch 12 --accum 2", "--global-batch 12 with --batch 4 on 1 rank "
           .. "is --accum 3, not --accum 2 (give one of the two)" },
      }) do
         out, status = run("--steps 1 " .. case[1])
         assert.equal(2, status, case[1])
         assert.equal(case[2] .. "\n", out)
      end
   end)

   it("refuses a checkpoint of another vocabulary or another kind of data", function()
      helpers.sh("mkdir -p " .. dir .. ".data")
      local data = "--data '" .. helpers.token_dataset(dir .. ".data", 2000, 300) .. "' "
      assert.equal(0, select(2, run(data .. "--vocab 300 --steps 4 --stop-after 2 --ckpt-dir "
         .. dir)))
      local out, status = run(data .. "--vocab 400 --steps 4 --resume --ckpt-dir " .. dir)
      assert.equal(1, status)
      assert.equal("--resume: this run has --vocab 400, but the checkpoint was trained with "
         .. "--vocab 300: " .. dir .. "/step-000000002 cannot continue it (resume with the "
         .. "checkpoint's setting, or start a new run in another --ckpt-dir)\n", out)
      out, status = run("--steps 4 --resume --ckpt-dir " .. dir)
      assert.equal(1, status)
      assert.matches("--resume: this run has bytes of a text file as --data, but the checkpoint "
         .. "was trained on token shards: " .. dir .. "/step-000000002 cannot continue it", out, 1,
         true)
      out, status = run(data .. "--vocab 300 --steps 4 --resume --ckpt-dir " .. dir)
      assert.equal(0, status, out)
   end)

   it("trains nothing when resumed past --stop-after, and still writes the parameters", function()
      assert.equal(0, select(2, run("--steps 6 --stop-after 4 --ckpt-dir " .. dir)))
      local out, status = run("--steps 6 --stop-after 3 --resume --ckpt-dir " .. dir
         .. " --save-params " .. file)
      assert.equal(0, status, out)
      assert.matches("nothing to train: the checkpoint is at step 4 and the run ends at step 3 "
         .. "(--stop-after)", out, 1, true)
      assert.is_true(exists(file))
   end)

   it("writes the parameters when resumed at the last step (a kill after the last save)",
      function()
      assert.equal(0, select(2, run("--steps 4 --ckpt-every 2 --ckpt-dir " .. dir)))
      local out, status = run("--steps 4 --resume --ckpt-dir " .. dir .. " --save-params " .. file)
      assert.equal(0, status, out)
      assert.matches("nothing to train: the checkpoint is at step 4 and the run ends at step 4 "
         .. "(--steps)", out, 1, true)
      assert.is_true(exists(file))
      assert.is_false(exists(file .. ".tmp"))
   end)

   it("checks every output path before the first step", function()
      helpers.sh("touch " .. file)
      for _, case in ipairs({
         { "--ckpt-dir " .. file, "--ckpt-dir '" .. file .. "' cannot be created: files: " .. file
           .. " exists and is not a directory" },
         { "--ckpt-dir /proc/lwopt-test", "--ckpt-dir '/proc/lwopt-test' cannot be created" },
         { "--save-params /proc/lwopt.safetensors", "--save-params '/proc/lwopt.safetensors' "
           .. "cannot be created" },
         { "--save-params /tmp", "--save-params '/tmp' is a directory, not a file" },
         { "--log /proc/lwopt.jsonl", "--log '/proc/lwopt.jsonl' cannot be created" },
      }) do
         local out, status = run("--steps 500 --progress lines " .. case[1]:gsub("--quiet", ""))
         assert.equal(1, status, case[1])
         assert.matches(case[2], out, 1, true)
         assert.is_nil(out:find("step ", 1, true))
      end
   end)

   it("refuses a path longer than the system takes, with the reason, creating nothing",
      function()
      local long = dir .. ("/" .. ("d"):rep(200)):rep(25)
      for _, flag in ipairs({ "--ckpt-dir " .. long, "--log " .. long .. "/log.jsonl" }) do
         local out, status = run("--steps 2 " .. flag)
         assert.equal(1, status, out)
         -- the reason, at the end of the line, whichever call met the path first
         assert.is_truthy(out:match(": the path has %d+ characters, more than this system takes "
            .. "%(%d+%)\n$") or out:match(": File name too long%)?\n$"), out)
         assert.equal(1, select(2, out:gsub("\n", ""))) -- one line
         assert.is_false(exists(dir))
      end
   end)

   it("refuses an output that is an input or another output, by real path, before step 1",
      function()
      helpers.sh("mkdir -p " .. dir .. "/data && head -c 100000 " .. root .. "/data/kjv.txt > "
         .. dir .. "/data/corpus.txt && ln -s " .. dir .. "/data " .. dir .. "/link && ln "
         .. dir .. "/data/corpus.txt " .. dir .. "/hard.txt")
      local corpus = dir .. "/data/corpus.txt"
      local shards = helpers.token_dataset(dir .. "/data", 2000, 300)
      local same = "is the same file as %s: writing it would destroy the run's input; choose "
         .. "another path"
      for _, case in ipairs({
         { "--data " .. corpus .. " --log " .. corpus, "--log '" .. corpus .. "' "
           .. same:format("--data '" .. corpus .. "'") },
         { "--data " .. corpus .. " --save-params " .. dir .. "/data/./corpus.txt",
           "--save-params '" .. dir .. "/data/./corpus.txt' " .. same:format("--data '"
           .. corpus .. "'") },
         { "--data " .. corpus .. " --log " .. dir .. "/link/corpus.txt", "--log '" .. dir
           .. "/link/corpus.txt' " .. same:format("--data '" .. corpus .. "'") },
         { "--data " .. corpus .. " --log " .. dir .. "/hard.txt", "--log '" .. dir
           .. "/hard.txt' " .. same:format("--data '" .. corpus .. "'") },
         { "--data '" .. shards .. "' --vocab 300 --save-params " .. dir .. "/data/t_val_000.bin",
           "--save-params '" .. dir .. "/data/t_val_000.bin' " .. same:format("a validation "
           .. "shard '" .. dir .. "/data/t_val_000.bin'") },
         { "--data " .. corpus .. " --log " .. dir .. "/out --save-params " .. dir .. "/out",
           "--save-params '" .. dir .. "/out' is the same file as --log '" .. dir .. "/out': one "
           .. "output would destroy the other; choose another path" },
         { "--data " .. corpus .. " --log " .. dir .. "/data/corpus.jsonl --save-params " .. dir
           .. "/data/corpus.png", "--save-params '" .. dir .. "/data/corpus.png' is the same "
           .. "file as the loss curve '" .. dir .. "/data/corpus.png' (beside --log '" .. dir
           .. "/data/corpus.jsonl')" },
         { "--data " .. corpus .. " --ckpt-dir " .. dir .. "/ck --log " .. dir .. "/ck/latest",
           "--log '" .. dir .. "/ck/latest' is where --ckpt-dir '" .. dir .. "/ck' keeps its "
           .. "checkpoints (latest, step-N): writing them would destroy --log; choose another "
           .. "path" },
      }) do
         local out, status = run("--steps 500 --progress lines " .. case[1])
         assert.equal(1, status, case[1])
         assert.equal(case[2], out:sub(1, #case[2]), case[1])
         assert.is_nil(out:find("step ", 1, true))
         assert.equal("100000", (helpers.sh("stat -c %s " .. corpus):gsub("%s", "")))
         assert.is_false(exists(dir .. "/out"))
      end
      -- the checkpoint being resumed is an input too
      assert.equal(0, select(2, run("--steps 2 --data " .. corpus .. " --ckpt-dir " .. dir
         .. "/ck")))
      local inside = dir .. "/ck/step-000000002/model.safetensors"
      local before = helpers.sh("cksum " .. inside)
      local out, status = run("--steps 4 --data " .. corpus .. " --resume --ckpt-dir " .. dir
         .. "/ck --save-params " .. inside)
      assert.equal(1, status, out)
      assert.matches("--save-params '" .. inside .. "' is inside the checkpoint being resumed, '"
         .. dir .. "/ck/step-000000002': writing it would destroy the run's input", out, 1, true)
      assert.equal(before, helpers.sh("cksum " .. inside))
   end)

   it("refuses a second job on a checkpoint directory at start, naming the first one's host "
      .. "and pid", function()
      local first = tonumber((helpers.sh("cd /tmp && { " .. recipe .. "--steps 100000 "
         .. "--ckpt-every 100000 --ckpt-dir " .. dir .. " > /dev/null 2>&1 & } && echo $!")))
      local lock = dir .. "/.lwopt-lock"
      local holder = ""
      for _ = 1, 200 do -- until the first job holds the lock
         holder = helpers.sh("cat " .. lock .. " 2>/dev/null")
         if holder:find("pid " .. first, 1, true) then break end
         helpers.sh("sleep 0.05")
      end
      local out, status = run("--steps 2 --resume --ckpt-dir " .. dir)
      local out2, status2 = run("--steps 2 --overwrite --ckpt-dir " .. dir)
      helpers.sh("kill " .. first .. " && while kill -0 " .. first .. " 2>/dev/null; do sleep "
         .. "0.05; done")
      local host = helpers.sh("hostname"):gsub("%s", "")
      local refused = ("--ckpt-dir %s is in use by another job (host %s, pid %d): two jobs "
         .. "saving into one directory would write over each other's checkpoints: wait for the "
         .. "other one to end, or choose another directory\n"):format(dir, host, first)
      assert.equal(1, status, out)
      assert.equal(refused, out)
      assert.equal(1, status2, out2)
      assert.equal(refused, out2)
      -- the lock goes with the process that held it, however it ended
      out, status = run("--steps 2 --overwrite --ckpt-dir " .. dir)
      assert.equal(0, status, out)
   end)

   it("finds a latest that is not a file at the start, whatever the flags", function()
      helpers.sh("mkdir -p " .. dir .. "/latest")
      for _, flag in ipairs({ "", "--overwrite", "--resume" }) do
         local out, status = run("--steps 500 --progress lines --ckpt-dir " .. dir .. " " .. flag)
         assert.equal(1, status, flag)
         assert.equal("--ckpt-dir " .. dir .. ": " .. dir .. "/latest is a directory, where "
            .. "checkpoints keep the file that names the newest of them: move it away or choose "
            .. "another directory\n", out)
      end
   end)

   it("stops a diverging run, says why, writes its outputs and exits 3", function()
      local log = dir .. ".jsonl"
      local out, status = run("--steps 40 --lr 1e3 --max-skips 3 --log " .. log
         .. " --save-params " .. file .. " --ckpt-dir " .. dir .. " --ckpt-every 1")
      assert.equal(3, status, out)
      local first = tonumber(out:match("step (%d+): update skipped: the gradients are not finite"))
      assert.is_not_nil(first, out)
      assert.matches(("step %d: update skipped: the gradients are not finite %%(loss "):format(
         first + 2), out)
      assert.matches(("stopped: 3 steps in a row (from step %d) had non-finite gradients"):format(
         first), out, 1, true)
      assert.matches("loss curve: " .. dir .. ".png", out, 1, true)
      assert.is_true(exists(file))
      assert.equal(first + 2, #helpers.log_records(log))
      -- no checkpoint of a skipped step: latest is the last step that updated
      assert.equal(("step-%09d"):format(first - 1), latest(dir))
   end)

   it("stops cleanly at an output it cannot write, naming the file and the reason, leaving "
      .. "whole records and no temporary file", function()
      -- a file-size limit fails writes as a full disk does (lwopt ignores SIGXFSZ: EFBIG)
      local log = dir .. ".jsonl"
      local out, status = helpers.sh("cd /tmp && ulimit -f 16 && " .. recipe
         .. "--steps 200 --log " .. log .. " --save-params " .. file .. " --ckpt-dir " .. dir
         .. " --ckpt-every 100")
      assert.equal(1, status, out)
      local step = tonumber(out:match("stopped after step (%d+): %-%-log: cannot write the "
         .. "record of step %d+ to " .. log:gsub("%p", "%%%0") .. " %(File too large%); the "
         .. "records before it are whole\n"))
      assert.is_not_nil(step, out)
      assert.matches(("the checkpoint of step %d could not be saved: "):format(step), out, 1, true)
      assert.matches("optim%-r00000%.safetensors: File too large\nno checkpoint of this run could "
         .. "be saved\n", out)
      assert.matches("failed: --save-params: safetensors.write: safetensors: writing " .. file
         .. ".tmp: File too large", out, 1, true)
      assert.matches("failed: loss curve: gnuplot could not write the whole of " .. dir .. ".png",
         out, 1, true)
      assert.is_false(exists(file .. ".tmp"))
      assert.is_false(exists(dir .. ".png"))
      assert.equal("", listing(dir)) -- the failed save's step-N.tmp removed
      local records = helpers.log_records(log)
      for i, rec in ipairs(records) do assert.equal(i, rec.step) end
      assert.equal(step - 1, #records)
   end)

   it("on a full disk, checkpoints the step whose record it could not log, or names the last "
      .. "checkpoint it saved", function()
      local full = dir .. ".full"
      helpers.sh("mkdir -p " .. full)
      -- a tmpfs of its own in a mount namespace of its own (root, or user namespaces)
      -- command's output, its status and then what is in `shown`
      local function on_tmpfs(size, command, shown)
         return helpers.sh(("unshare -rm sh -c 'mount -t tmpfs -o size=%s tmpfs %s && cd /tmp "
            .. "&& %s; echo \"status $?\"; ls %s'"):format(size, full, command, shown or full))
      end
      local probe = on_tmpfs("64k", "true")
      if not probe:find("status 0", 1, true) then
         return pending("no tmpfs can be mounted here (unshare -rm): " .. probe)
      end
      local out = on_tmpfs("64k", recipe .. "--steps 500 --log " .. full .. "/l.jsonl "
         .. "--ckpt-dir " .. dir)
      assert.matches("status 1\n", out, 1, true)
      local step = tonumber(out:match("stopped after step (%d+): %-%-log: cannot write the "
         .. "record of step %d+ to " .. full:gsub("%p", "%%%0") .. "/l%.jsonl %(No space left on "
         .. "device%)"))
      assert.is_not_nil(step, out)
      local saved = ("%s/step-%09d"):format(dir, step)
      assert.matches("the training state is in " .. saved .. ": resume from it with --resume",
         out, 1, true)
      out, status = run(("--steps %d --resume --ckpt-dir %s"):format(step + 1, dir))
      assert.equal(0, status, out)
      assert.matches(("resumed from %s: step %d"):format(saved, step), out, 1, true)
      -- with room again, the resumed run writes the record the full disk refused, first: the
      -- log has every step once (the checkpoint carried the record)
      helpers.sh("rm -rf " .. dir)
      out = on_tmpfs("64k", recipe .. "--steps 500 --log " .. full .. "/l.jsonl --ckpt-dir "
         .. dir .. "; mount -o remount,size=4m " .. full .. "; N=$(sed s/step-0*// " .. dir
         .. "/latest); " .. recipe .. "--steps 500 --resume --stop-after $((N + 2)) --log "
         .. full .. "/l.jsonl --ckpt-dir " .. dir .. " && cp " .. full .. "/l.jsonl " .. dir
         .. "/l.jsonl")
      assert.matches("status 0\n", out, 1, true)
      local records = helpers.log_records(dir .. "/l.jsonl")
      step = tonumber(latest(dir):match("%d+"))
      assert.is_true(step > 2, out)
      for i, rec in ipairs(records) do assert.equal(i, rec.step) end
      assert.equal(step, #records)
      -- checkpoints on the full disk: the one that does not fit stops the run, the one before
      -- is named, and the half-written one is removed
      out = on_tmpfs("3m", recipe .. "--steps 500 --ckpt-every 5 --ckpt-dir " .. full .. "/ck",
         full .. "/ck")
      assert.matches("stopped after step 10: the checkpoint of step 10 could not be saved: ", out,
         1, true)
      assert.matches("No space left on device\nthe training state is in " .. full
         .. "/ck/step-000000005: resume from it with --resume", out, 1, true)
      assert.matches("status 1\nlatest\nstep-000000005\n", out, 1, true)
   end)

   -- Starts the recipe in the background with args, sends `signal` once its log has `lines`
   -- lines (the configuration record and some steps), and waits: its output and status.
   local function signalled(signal, args, lines)
      return helpers.sh(("cd /tmp; %s%s & pid=$!; while [ \"$(cat %s.jsonl 2>/dev/null | wc -l)\" "
         .. "-lt %d ]; do sleep 0.05; done; kill -%s $pid; wait $pid"):format(recipe, args, dir,
         lines, signal))
   end

   it("stops at a step's end on SIGTERM, saves that step and exits 75; resumed, it goes on as if "
      .. "never stopped, logging every step once", function()
      local log = dir .. ".jsonl"
      local args = "--steps 2000 --ckpt-dir " .. dir .. " --log " .. log
      local out, status = signalled("TERM", args, 6)
      assert.equal(75, status, out)
      local step = tonumber(out:match("stopped after step (%d+): asked to stop by SIGTERM %(a "
         .. "scheduler's request to stop%)\n"))
      assert.is_not_nil(step, out)
      local saved = ("%s/step-%09d"):format(dir, step)
      assert.matches("the training state is in " .. saved .. ": run the same command with "
         .. "--resume to continue from it\n", out, 1, true)
      assert.equal(("step-%09d"):format(step), latest(dir))
      local records = helpers.log_records(log)
      assert.equal(step, #records)
      out, status = run(args .. " --resume --stop-after " .. (step + 2))
      assert.equal(0, status, out)
      records = helpers.log_records(log)
      for i, rec in ipairs(records) do assert.equal(i, rec.step) end
      assert.equal(step + 2, #records)
      -- the same losses and learning rates as a run that was never stopped
      local whole = dir .. "-whole.jsonl"
      out, status = run("--steps 2000 --stop-after " .. (step + 2) .. " --log " .. whole)
      assert.equal(0, status, out)
      local expect = helpers.log_records(whole)
      for i = step + 1, step + 2 do
         assert.same({ expect[i].loss, expect[i].lr }, { records[i].loss, records[i].lr })
      end
   end)

   it("stops at a step's end on Ctrl-C, saves that step and exits 130", function()
      local out, status = signalled("INT", "--steps 2000 --ckpt-dir " .. dir .. " --log " .. dir
         .. ".jsonl", 4)
      assert.equal(130, status, out)
      local step = tonumber(out:match("stopped after step (%d+): asked to stop by Ctrl%-C "
         .. "%(SIGINT%)\n"))
      assert.is_not_nil(step, out)
      assert.equal(("step-%09d"):format(step), latest(dir))
      assert.is_nil(out:find("traceback", 1, true), out)
   end)

   it("without --ckpt-dir, stops on SIGUSR1 at a step's end, saying nothing was saved", function()
      local out, status = signalled("USR1", "--steps 2000 --log " .. dir .. ".jsonl", 4)
      assert.equal(75, status, out)
      assert.matches("asked to stop by SIGUSR1 (a request to stop ahead of a time limit)\n"
         .. "without --ckpt-dir nothing of this run was saved\n", out, 1, true)
   end)

   it("runs the end-of-run steps independently: a failed plot skips nothing", function()
      local empty = dir .. "-bin"
      helpers.sh("mkdir -p " .. empty)
      local out, status = helpers.sh("cd /tmp && PATH=" .. empty .. " "
         .. recipe:gsub("^luajit", "/usr/bin/luajit"):gsub("%-%-sample 0", "--sample 10")
         .. "--steps 2 --log " .. dir .. ".jsonl --save-params " .. file)
      assert.equal(1, status, out)
      assert.matches("failed: loss curve: gnuplot is not installed", out, 1, true)
      assert.matches("sample:\nAnd God said", out, 1, true)
      assert.is_true(exists(file))
   end)
end)
