-- recipe_order_spec.lua: --data-order sequential through recipes/gpt_small.lua (tiny preset, a
-- 1000-byte text: 29 sequences of 32 bytes an epoch, so 8 steps of 6 wrap once): every sequence
-- each rank's loader filled (spec/fixtures/record_batches.lua) is the one the order says, read
-- here from the text; a run of 4 steps at 2 ranks resumed to 8 at 1 and at 3 ranks reads what an
-- uninterrupted run reads (at 1 rank also its losses, within resharding's 1e-5), and with another
-- global batch goes on from the checkpoint's position; the log says the epoch; a checkpoint of
-- random windows resumes sequential data from its start, said.
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")
local MPIRUN = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun "
   .. "--oversubscribe -x OPENBLAS_NUM_THREADS=1 -x LWOPT_RECORD_BATCHES "
local T, PER_EPOCH = 32, 29

describe("recipes/gpt_small.lua --data-order sequential #mpi", function()
   local dir, text, corpus
   setup(function()
      dir = helpers.tempdir()
      local chars = {}
      for i = 1, 1000 do chars[i] = string.char(32 + (i * 31 + (i * i) % 89) % 95) end
      text = table.concat(chars)
      corpus = dir .. "/corpus.txt"
      local f = assert(io.open(corpus, "wb"))
      f:write(text)
      f:close()
   end)
   teardown(function() helpers.sh("rm -rf " .. dir) end)

   -- Runs the recipe on np ranks (1: no mpirun), recording its batches under `name`; its output.
   local function run(np, name, args)
      local launcher = np > 1 and (MPIRUN .. "-np " .. np .. " ") or ""
      local out, status = helpers.sh(("cd /tmp && LWOPT_RECORD_BATCHES=%s/batches-%s %sluajit "
         .. "%s/spec/fixtures/record_batches.lua %s/recipes/gpt_small.lua --preset tiny --steps 8 "
         .. "--batch 1 --sample 0 --quiet --eval-every 0 --data-order sequential --data %s %s")
         :format(dir, name, launcher, root, root, corpus, args))
      assert.equal(0, status, out)
      return out
   end

   -- The sequences recorded under `name`, every rank's: seqs[step][k] = { offset, hex }; each
   -- (step, k) once.
   local function recorded(name)
      local seqs = {}
      for _, path in ipairs(helpers.lines_of("ls " .. dir .. "/batches-" .. name .. ".*")) do
         for line in io.lines(path) do
            local step, k, offset, hex = line:match("^(%d+) (%d+) (%d+) (%x+)$")
            step, k = tonumber(step), tonumber(k)
            seqs[step] = seqs[step] or {}
            assert.is_nil(seqs[step][k], ("%s: step %d, sequence %d twice"):format(name, step, k))
            seqs[step][k] = { tonumber(offset), hex }
         end
      end
      return seqs
   end

   -- What the run's sequence n holds: its offset and bytes, from the text.
   local function expected(n)
      local at = n % PER_EPOCH * T
      return { at, (text:sub(at + 1, at + T):gsub(".", function(c)
         return ("%02x"):format(c:byte())
      end)) }
   end

   -- Steps first..last of seqs read sequence `start + (step - first) x global + k` as k.
   local function reads_in_order(seqs, first, last, global, start)
      for step = first, last do
         assert.is_table(seqs[step], "no sequences recorded at step " .. step)
         for k = 0, global - 1 do
            assert.same(expected(start + (step - first) * global + k), seqs[step][k],
               ("step %d, sequence %d"):format(step, k))
         end
         assert.is_nil(seqs[step][global])
      end
   end

   local function losses(log)
      local out = {}
      for _, r in ipairs((helpers.log_records(log))) do out[r.step] = { r.loss, r.epoch } end
      return out
   end

   it("resumes at 1 and at 3 ranks reading what an uninterrupted run reads", function()
      run(1, "whole", "--global-batch 6 --log " .. dir .. "/whole.jsonl")
      local whole = recorded("whole")
      reads_in_order(whole, 1, 8, 6, 0)
      -- epoch 1 (steps 1-5) read every byte of its 29 sequences once
      local seen = {}
      for step = 1, 5 do
         for k = 0, 5 do
            local n = (step - 1) * 6 + k
            if n < PER_EPOCH then
               for g = whole[step][k][1], whole[step][k][1] + T - 1 do
                  assert.is_nil(seen[g]); seen[g] = true
               end
            end
         end
      end
      for g = 0, PER_EPOCH * T - 1 do assert.is_true(seen[g], "byte " .. g) end

      local ck = dir .. "/ck"
      run(2, "first", "--global-batch 6 --stop-after 4 --ckpt-dir " .. ck)
      reads_in_order(recorded("first"), 1, 4, 6, 0)
      local manifest = helpers.slurp(ck .. "/step-000000004/manifest.json")
      assert.matches('"sequence": 24,', manifest, 1, true)
      assert.matches('"shard_offset": 768,', manifest, 1, true)
      helpers.sh(("cp -r %s %s3 && cp -r %s %s1"):format(ck, ck, ck, ck))

      local out = run(1, "at1", "--ckpt-dir " .. ck .. " --resume --log " .. dir .. "/at1.jsonl")
      assert.matches("resume: --accum 6 (was 3) keeps the checkpoint's global batch", out, 1, true)
      local at1 = recorded("at1")
      assert.is_nil(at1[4])
      reads_in_order(at1, 5, 8, 6, 24)
      local want, got = losses(dir .. "/whole.jsonl"), losses(dir .. "/at1.jsonl")
      for step = 5, 8 do
         assert.is_true(math.abs(want[step][1] - got[step][1]) < 1e-5, "loss at step " .. step)
         assert.equal(2, got[step][2]) -- step 5 wraps: epoch 2
      end
      for step = 1, 4 do assert.equal(1, want[step][2]) end

      run(3, "at3", "--ckpt-dir " .. ck .. "3 --resume")
      reads_in_order(recorded("at3"), 5, 8, 6, 24)

      -- another global batch: on from sequence 24, 3 a step
      out = run(1, "other", "--ckpt-dir " .. ck .. "1 --resume --global-batch 3")
      reads_in_order(recorded("other"), 5, 8, 3, 24)
   end)

   it("resumes a checkpoint of random windows from the data's start, and says so", function()
      local ck = dir .. "/random"
      local out, status = helpers.sh(("cd /tmp && luajit %s/recipes/gpt_small.lua --preset tiny "
         .. "--steps 4 --stop-after 2 --batch 2 --sample 0 --quiet --data %s --ckpt-dir %s")
         :format(root, corpus, ck))
      assert.equal(0, status, out)
      out = run(1, "fromrandom", "--ckpt-dir " .. ck .. " --resume --steps 4")
      assert.matches("resume: " .. ck .. "/step-000000002 keeps no position in sequential data "
         .. "(it read random windows): reading from the data's start", out, 1, true)
      assert.matches("--data-order sequential (was random)", out, 1, true)
      reads_in_order(recorded("fromrandom"), 3, 4, 2, 0)
   end)
end)
