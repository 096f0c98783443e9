-- recipe_init_llama_spec.lua: the recipe's --init-from an hf-llama file (a tiny LLaMA's export,
-- made with the interleaved rotary pairing and exported in the halves one): the model's shape
-- taken from the file (GQA, MLP, vocabulary, RMSNorm epsilon, rotary base; the sequence at
-- most its max_position_embeddings), step 1's loss the file's model's on that batch, read back
-- by `lwopt eval`; a shape flag that contradicts the file, and a file of the other
-- architecture, refused by name.
local lw = require("lwopt")
local export = require("lwopt.export")
local trained = require("lwopt.trained")
local helpers = require("helpers")
local fh = require("foreign_helpers")
local eh = require("export_helpers")

-- A tiny LLaMA on bytes (2 layers x 32, 4 heads, 2 KV, MLP 96, 16 positions, RMSNorm eps 1e-6,
-- rotary base 10000, interleaved pairing) as a checkpoint in dir/llama-ck and its hf-llama
-- export in dir/llama-hf.
local function llama_file(dir)
   local cfg = lw.models.config("llama", { n_layer = 2, n_embd = 32, n_head = 4, n_kv_head = 2,
      mlp_hidden = 96, vocab = 256, seq_len = 16, norm_eps = 1e-6, rope_base = 10000,
      rope_pairing = "interleaved" })
   local ckpt = eh.checkpoint(dir .. "/llama-ck", "llama", cfg, { arch = "llama", model = cfg,
      n_layer = 2, n_embd = 32, n_head = 4, vocab = 256, seq = 16, data_kind = "bytes" }, 0.3,
      0.02)
   export.run({ ckpt = ckpt, format = "hf-llama", out_dir = dir .. "/llama-hf" })
   return ckpt, dir .. "/llama-hf/model.safetensors"
end

describe("--init-from an hf-llama file", function()
   local dir, text
   before_each(function() dir, text = fh.dir_with_text() end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   it("takes the file's shape, starts from its model and is read back by eval", function()
      local _, hf = llama_file(dir)
      -- --preset tiny's 32 positions: the file's 16 at most
      local recipe = "luajit recipes/gpt_small.lua --preset tiny --arch llama --sample 0 --quiet "
         .. "--data " .. text .. " --init-from " .. hf .. " --warmup 1 --ckpt-dir " .. dir
         .. "/run --batch 4 "
      local out, status = helpers.sh(recipe .. "--steps 2 --stop-after 1 --log " .. dir
         .. "/log.jsonl")
      assert.equal(0, status, out)
      assert.matches("the model's shape is " .. hf .. "'s (hf-llama names): 2 layers x 32, 4 "
         .. "heads (2 KV), MLP 96, sequence 16, vocabulary 256, an untied LM head, RMSNorm eps "
         .. "1e-06, rotary base 10000\n", out, 1, true)
      assert.matches("initialised from " .. hf .. ": 21 tensors by hf-llama's names (q, k, v "
         .. "and gate, up joined into the fused weights), F32", out, 1, true)
      -- step 1's loss is the file's model's on the run's first batch (batch 4, seed 1337)
      fh.check_first_step(dir .. "/log.jsonl", hf, text, 4, 16)
      -- resumed with the same command; the checkpoint is read back as the run's LLaMA
      out, status = helpers.sh(recipe .. "--steps 2 --resume")
      assert.equal(0, status, out)
      local tuned = trained.open(dir .. "/run")
      assert.equal(2, tuned.step)
      assert.equal("llama", tuned.arch)
      assert.equal(1e-6, tuned.cfg.norm_eps)
      assert.equal(10000, tuned.cfg.rope_base)
      local loss = fh.eval_loss(dir .. "/run", text)
      assert.is_true(loss > 0 and loss < 10)
   end)

   it("refuses a contradicting shape flag and the other architecture, by name", function()
      local _, hf = llama_file(dir)
      local _, gpt = fh.model_files(dir, true)
      local recipe = "luajit recipes/gpt_small.lua --preset tiny --steps 1 --sample 0 --quiet "
         .. "--data " .. text
      fh.refuses(recipe, {
         { " --arch llama --init-from " .. hf .. " --n-kv-head 4", "--n-kv-head 4: --init-from "
           .. hf .. " has 2 KV heads" },
         { " --arch llama --init-from " .. hf .. " --n-layer 3", "--n-layer 3: --init-from "
           .. hf .. " has 2 layers" },
         { " --arch llama --init-from " .. hf .. " --seq 32", "--seq 32: --init-from " .. hf
           .. " has 16 positions (its max_position_embeddings)" },
         { " --init-from " .. hf, "--init-from " .. hf .. " holds a LLaMA (hf-llama names), and "
           .. "--arch gpt builds GPT-2's: add --arch llama" },
         { " --arch llama --init-from " .. gpt, "--init-from " .. gpt .. " holds a GPT-2 "
           .. "(hf-gpt2 names), and --arch llama builds LLaMA's: drop --arch llama" },
      })
   end)
end)
