-- recipe_arch_spec.lua: --arch llama in recipes/gpt_small.lua: LLaMA's model (lw.models) trains,
-- checkpoints with its config, resumes as an uninterrupted run does, gives `lwopt sample` and
-- `lwopt eval` the run's own sample and loss (from its hf-llama export too), splits over ranks
-- (ZeRO-3, --tp) with the one-rank losses, and is refused where it does not fit (hf-gpt2,
-- --n-kv-head without it, a GPT resume). --arch nanochat likewise (its export in nanochat's
-- names); under --tp its checkpoint resumes on one rank, and with --activations bf16 it tracks
-- the fp32 run.
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")
local recipe = "cd /tmp && luajit " .. root .. "/recipes/gpt_small.lua --preset tiny --arch llama "
   .. "--n-kv-head 2 --eval-max 4 --warmup 2 --progress lines "
local lwopt = "cd /tmp && " .. root .. "/bin/lwopt "
local MPIRUN = "cd /tmp && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 200 "
   .. "mpirun -np 2 -x OPENBLAS_NUM_THREADS=1 luajit " .. root .. "/recipes/gpt_small.lua "
   .. "--preset tiny --arch llama --n-kv-head 2 --eval-max 4 --warmup 2 --progress lines "

local function losses(out)
   local t = {}
   for step, loss in out:gmatch("step +(%d+)/%d+  loss (%d+%.%d+)") do t[tonumber(step)] = loss end
   return t
end

-- The output of a run that checkpointed in dir: `lwopt sample` and `lwopt eval` of dir give its
-- sample and final validation loss, eval naming the model as model (a pattern) says. Returns
-- the run's losses by step.
local function read_back(out, dir, model)
   local sample = out:match("(sample:\n[^\n]*)")
   local final = out:match("final validation loss (%d+%.%d+)")
   local said, st = helpers.sh(lwopt .. "sample " .. dir)
   assert.equal(0, st, said)
   assert.matches(sample, said, 1, true)
   said, st = helpers.sh(lwopt .. "eval " .. dir .. " --data " .. root .. "/data/kjv.txt")
   assert.equal(0, st, said)
   assert.matches("validation loss " .. final, said, 1, true)
   assert.matches(model, said)
   return losses(out), final
end

-- run (a recipe command) from scratch in dir for 6 steps, stopped at 4 and resumed: steps 5 and
-- 6 have the losses of whole, the uninterrupted run's.
local function resumes(run, dir, whole)
   helpers.sh("rm -rf " .. dir)
   local out, status = helpers.sh(run .. "--steps 6 --sample 0 --stop-after 4 --ckpt-dir " .. dir)
   assert.equal(0, status, out)
   out, status = helpers.sh(run .. "--steps 6 --sample 0 --resume --ckpt-dir " .. dir)
   assert.equal(0, status, out)
   local resumed = losses(out)
   for s = 5, 6 do assert.equal(whole[s], resumed[s], "step " .. s) end
end

describe("--arch llama", function()
   it("trains, resumes as an uninterrupted run, and samples and evaluates from its checkpoint",
      function()
      local dir = helpers.fresh_path()
      local out, status = helpers.sh(recipe .. "--steps 6 --sample 30 --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      assert.matches("LLaMA 4 layers x 64, 4 heads %(2 KV%)", out)
      assert.matches("export " .. dir .. " --format hf-llama " .. dir .. "-hf", out, 1, true)
      local whole, final = read_back(out, dir,
         "LLaMA 4 layers x 64, 4 heads %(2 KV%), sequence 32, bytes")
      local said, st = helpers.sh(lwopt .. "export " .. dir .. " --format hf-gpt2 " .. dir .. "-hf")
      assert.equal(1, st)
      assert.matches("holds a LLaMA model, which --format hf-gpt2 does not hold: use --format "
         .. "hf-llama", said, 1, true)
      -- the line the run printed: its export, which sample and eval read as the run's model
      said, st = helpers.sh(lwopt .. "export " .. dir .. " --format hf-llama " .. dir .. "-hf")
      assert.equal(0, st, said)
      said, st = helpers.sh(lwopt .. "sample " .. dir .. "-hf/model.safetensors --tokens 8")
      assert.equal(0, st, said)
      assert.matches("note: hf-llama names", said, 1, true)
      assert.matches("sample:\n", said, 1, true)
      said, st = helpers.sh(lwopt .. "eval " .. dir .. "-hf/model.safetensors --eval-max 4 "
         .. "--data " .. root .. "/data/kjv.txt")
      assert.equal(0, st, said)
      assert.matches("validation loss " .. final, said, 1, true)
      assert.matches("LLaMA 4 layers x 64, 4 heads (2 KV), sequence 32, bytes", said, 1, true)
      helpers.sh("rm -rf " .. dir .. "-hf")
      -- stopped at 4 and resumed: the uninterrupted run's losses
      resumes(recipe, dir, whole)
      -- GPT-2's model cannot continue it
      out, status = helpers.sh("cd /tmp && luajit " .. root .. "/recipes/gpt_small.lua --preset "
         .. "tiny --steps 8 --resume --ckpt-dir " .. dir)
      assert.equal(1, status)
      assert.matches("--arch", out, 1, true)
      helpers.sh("rm -rf " .. dir)
   end)

   it("refuses --n-kv-head without --arch llama", function()
      local out, status = helpers.sh("cd /tmp && luajit " .. root .. "/recipes/gpt_small.lua "
         .. "--preset tiny --n-kv-head 2 --steps 1")
      assert.equal(1, status)
      assert.matches("--n-kv-head is for --arch llama", out, 1, true)
   end)

   it("gives the one-rank losses on 2 ranks at ZeRO-3 and with --tp 2 #mpi", function()
      -- the same global batch of 8 sequences: 2 micro-steps of 4 on one rank (or one TP group)
      local one = losses((helpers.sh(recipe .. "--steps 3 --sample 0 --batch 4 --global-batch 8")))
      for _, flags in ipairs({ "--zero 3", "--tp 2" }) do
         local out, status = helpers.sh(MPIRUN .. "--steps 3 --sample 0 --batch 4 --global-batch 8 "
            .. flags)
         assert.equal(0, status, out)
         local two = losses(out)
         for s = 1, 3 do
            assert.is_true(math.abs(tonumber(one[s]) - tonumber(two[s])) < 2e-4,
               flags .. " step " .. s .. ": " .. one[s] .. " vs " .. tostring(two[s]))
         end
      end
   end)
end)

describe("--arch nanochat", function()
   local nanochat = "cd /tmp && luajit " .. root .. "/recipes/gpt_small.lua --preset tiny --arch "
      .. "nanochat --n-kv-head 2 --eval-max 4 --warmup 2 --progress lines "
   local MPI_NANOCHAT = MPIRUN:gsub("%-%-arch llama", "--arch nanochat")

   it("trains, resumes as an uninterrupted run, and samples and evaluates from its checkpoint",
      function()
      local dir = helpers.fresh_path()
      local out, status = helpers.sh(nanochat .. "--steps 6 --sample 30 --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      assert.matches("nanochat 4 layers x 64, 4 heads %(2 KV%)", out)
      assert.matches("export " .. dir .. " --format nanochat " .. dir .. "-nanochat   # for "
         .. "nanochat", out, 1, true)
      local whole = read_back(out, dir,
         "nanochat 4 layers x 64, 4 heads %(2 KV%), sequence 32, bytes")
      local said, st = helpers.sh(lwopt .. "export " .. dir .. " --format hf-llama " .. dir .. "-hf")
      assert.equal(1, st)
      assert.matches("holds a nanochat model, which --format hf-llama does not hold", said, 1,
         true)
      said, st = helpers.sh(lwopt .. "export " .. dir .. " " .. dir .. "-nc")
      assert.equal(0, st, said)
      assert.matches("as nanochat: ", said, 1, true)
      helpers.sh("rm -rf " .. dir .. "-nc")
      resumes(nanochat, dir, whole)
      helpers.sh("rm -rf " .. dir)
   end)

   it("gives the one-rank losses on 2 ranks at ZeRO-3 and with --tp 2, and resumes its --tp 2 "
      .. "checkpoint on one rank #mpi", function()
      local one = losses((helpers.sh(nanochat .. "--steps 3 --sample 0 --batch 4 "
         .. "--global-batch 8")))
      local dir = helpers.fresh_path()
      for _, flags in ipairs({ "--zero 3", "--tp 2 --stop-after 2 --ckpt-dir " .. dir }) do
         local out, status = helpers.sh(MPI_NANOCHAT .. "--steps 3 --sample 0 --batch 4 "
            .. "--global-batch 8 " .. flags)
         assert.equal(0, status, out)
         local two = losses(out)
         for s = 1, flags:find("--tp", 1, true) and 2 or 3 do
            assert.is_true(math.abs(tonumber(one[s]) - tonumber(two[s])) < 2e-4,
               flags .. " step " .. s .. ": " .. one[s] .. " vs " .. tostring(two[s]))
         end
      end
      -- the TP shards of the value embeddings and gates put together again at tp 1
      local out, status = helpers.sh(nanochat .. "--steps 3 --sample 0 --batch 4 "
         .. "--global-batch 8 --resume --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      local resumed = losses(out)
      assert.is_nil(resumed[2])
      assert.is_true(math.abs(tonumber(one[3]) - tonumber(resumed[3])) < 2e-4,
         "resumed step 3: " .. one[3] .. " vs " .. tostring(resumed[3]))
      helpers.sh("rm -rf " .. dir)
   end)

   it("trains with --activations bf16 within bf16's rounding of the fp32 run", function()
      local run = nanochat .. "--steps 3 --sample 0 --batch 4 "
      local fp32 = losses((helpers.sh(run)))
      local out, status = helpers.sh(run .. "--activations bf16")
      assert.equal(0, status, out)
      local bf16 = losses(out)
      local moved = false -- the losses are printed to 4 places: the rounding shows in some
      for s = 1, 3 do
         local d = math.abs(tonumber(fp32[s]) - tonumber(bf16[s]))
         assert.is_true(d < 2e-2, "step " .. s .. ": " .. fp32[s] .. " vs " .. tostring(bf16[s]))
         moved = moved or d > 0
      end
      assert.is_true(moved, "bf16 rounded nothing")
   end)
end)
