-- recipe_init_spec.lua: the recipe's --init-from an hf-gpt2 file with biases (a tiny lwopt
-- model's export): the model's shape taken from the file, step 1's loss the file's model's on
-- that batch, the biases trained, the checkpoints resumed and read back by `lwopt eval`; a
-- shape flag that contradicts the file refused by name.
local trained = require("lwopt.trained")
local helpers = require("helpers")
local fh = require("foreign_helpers")

local model_files, eval_loss = fh.model_files, fh.eval_loss

describe("--init-from a file in another program's names", function()
   local dir, text
   before_each(function() dir, text = fh.dir_with_text() end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   it("is fine-tuned by --init-from in the file's shape, saved, resumed and read back", function()
      local _, hf = model_files(dir, true)
      local recipe = "luajit recipes/gpt_small.lua --preset tiny --sample 0 --quiet --data "
         .. text .. " --init-from " .. hf .. " --warmup 1 --ckpt-dir " .. dir .. "/run "
      local out, status = helpers.sh(recipe .. "--steps 2 --stop-after 1 --log " .. dir
         .. "/log.jsonl")
      assert.equal(0, status, out)
      assert.matches("the model's shape is " .. hf .. "'s (hf-gpt2 names): 2 layers x 16, 2 "
         .. "heads, sequence 8, vocabulary 256, biases, a tied LM head\n", out, 1, true)
      assert.matches("initialised from " .. hf .. ": 28 tensors by hf-gpt2's names (Conv1D "
         .. "weights transposed back), F32", out, 1, true)
      -- step 1's loss is the file's model's on the run's first batch (batch 8, seed 1337)
      local t = fh.check_first_step(dir .. "/log.jsonl", hf, text, 8, 8)
      -- the biases are AdamW's parameters and trained
      out, status = helpers.sh(recipe .. "--steps 2 --resume")
      assert.equal(0, status, out)
      assert.matches("resumed from " .. dir .. "/run/step-000000001", out, 1, true)
      local tuned = trained.open(dir .. "/run")
      assert.equal(2, tuned.step)
      assert.is_true(tuned.cfg.bias)
      local a, b = t.ddp:param("h.0.attn.qkv.bias"):totable(),
         tuned.ddp:param("h.0.attn.qkv.bias"):totable()
      assert.are_not.same(a, b)
      -- without --init-from the preset's shape cannot continue it, and says why
      out, status = helpers.sh("luajit recipes/gpt_small.lua --preset tiny --sample 0 --quiet "
         .. "--data " .. text .. " --steps 3 --ckpt-dir " .. dir .. "/run --resume")
      assert.equal(1, status, out)
      assert.matches("this run has --preset tiny (4 layers x 64, 4 heads), but the checkpoint's "
         .. "model is --init-from " .. hf .. "'s shape (2 layers x 16, 2 heads)", out, 1, true)
      local loss = eval_loss(dir .. "/run", text)
      assert.is_true(loss > 0 and loss < 10)
      -- exported again, its trained biases and all: the same model
      out, status = helpers.sh("bin/lwopt export " .. dir .. "/run --format hf-gpt2 " .. dir
         .. "/tuned")
      assert.equal(0, status, out)
      assert.equal(loss, (eval_loss(dir .. "/tuned/model.safetensors", text)))
   end)

   it("refuses a shape flag that contradicts the --init-from file, by name", function()
      local _, hf = model_files(dir, true)
      local recipe = "luajit recipes/gpt_small.lua --preset tiny --steps 1 --sample 0 --quiet "
         .. "--data " .. text .. " --init-from " .. hf
      fh.refuses(recipe, {
         { " --n-layer 3", "--n-layer 3: --init-from " .. hf .. " has 2 layers" },
         { " --n-head 4", "--n-head 4: --init-from " .. hf .. " has 2 attention heads (its "
           .. "metadata's config)" },
         { " --seq 16", "--seq 16: --init-from " .. hf .. " has 8 positions (the sequence "
           .. "length)" },
      })
   end)

   it("takes the vocabulary from the file, refusing data or a --vocab that contradicts it",
      function()
      local _, hf = model_files(dir, true, 300)
      local shards = helpers.token_dataset(dir, 2000, 300)
      local recipe = "luajit recipes/gpt_small.lua --preset tiny --steps 1 --sample 0 --quiet "
         .. "--init-from " .. hf
      local out, status = helpers.sh(recipe .. " --data '" .. shards .. "'")
      assert.equal(0, status, out)
      assert.matches("sequence 8, vocabulary 300, biases", out, 1, true)
      out, status = helpers.sh(recipe .. " --data '" .. shards .. "' --vocab 400")
      assert.is_not.equal(0, status, out)
      assert.matches("--vocab 400: --init-from " .. hf .. " holds a vocabulary of 300 tokens",
         out, 1, true)
      out, status = helpers.sh(recipe .. " --data " .. text)
      assert.is_not.equal(0, status, out)
      assert.matches("--init-from " .. hf .. " holds a vocabulary of 300 tokens, but --data is a "
         .. "text file, read as bytes (256)", out, 1, true)
   end)
end)
