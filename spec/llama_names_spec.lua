-- llama_names_spec.lua: `lwopt export --format hf-llama` (llama_names.lua) and its way back:
-- every tensor of the export compared with the checkpoint's under a mapping written again here
-- (Q, K, V and gate, up rows cut out of the fused weights; each head's interleaved rotary pairs
-- (2i, 2i + 1) moved to (i, i + hd/2)); config.json; the model read back by lwopt.trained and
-- --init-from gives the checkpoint's outputs and weights; the refusals. tests/export/
-- check_hf_llama.py checks the same against a numpy LlamaForCausalLM.
local lw = require("lwopt")
local json = require("lwopt.json")
local trained = require("lwopt.trained")
local init_from = require("lwopt.init_from")
local helpers = require("helpers")
local eh = require("export_helpers")
local run, tensors_of = eh.run, eh.tensors_of

-- C 32, 4 heads of 8, 2 KV heads, MLP 64 (fused fc: 128 rows), 128 rows of which 50 are the
-- real vocabulary.
local C, HEADS, KV, HD, H, ROWS, VOCAB = 32, 4, 2, 8, 64, 128, 50

-- The lw.models llama config of the test model; o: pairing, tied, qk_norm.
local function config(o)
   return lw.models.config("llama", { n_layer = 2, n_embd = C, n_head = HEADS, n_kv_head = KV,
      mlp_hidden = H, vocab = ROWS, seq_len = 8, rope_pairing = o.pairing or "halves",
      tied = o.tied or false, qk_norm = o.qk_norm or false })
end

-- A checkpoint in dir of that model, every value different, with the settings a --arch llama
-- run records. Returns its step directory and the model's config.
local function make_checkpoint(dir, o)
   o = o or {}
   local cfg = config(o)
   return eh.checkpoint(dir, "llama", cfg, { arch = "llama", model = cfg, n_layer = 2,
      n_embd = C, n_head = HEADS, vocab = VOCAB, seq = 8, data_kind = "tokens" }, 0.5, 0), cfg
end

-- The row of lwopt's tensor that row r of a Q or K block holds (theirs in halves pairing): the
-- same row, or for the interleaved pairing, pair member j of pair i at ours 2i + j.
local function ours_row(r, pairing)
   if pairing ~= "interleaved" then return r end
   local head, i = math.floor(r / HD), r % HD
   local pair, member = i % (HD / 2), i < HD / 2 and 0 or 1
   return head * HD + 2 * pair + member
end

-- Every tensor of the export at out equals the checkpoint's under the mapping.
local function compare(ckpt, out, pairing, tied)
   local ours = tensors_of(ckpt .. "/model.safetensors")
   local theirs, order = tensors_of(out .. "/model.safetensors")
   local function rows(name, from, first, n, turned)
      local t, o = theirs[name], ours[from]
      assert.is_not_nil(t, name)
      local w = o.shape[2] or 1
      assert.same(w == 1 and { n } or { n, w }, t.shape, name)
      for r = 0, n - 1 do
         local src = first + (turned and ours_row(r, pairing) or r)
         for j = 0, w - 1 do assert.equal(o.data[src * w + j], t.data[r * w + j], name) end
      end
   end
   local expected = 0
   local function count(...) expected = expected + select("#", ...) end
   rows("model.embed_tokens.weight", "wte.weight", 0, VOCAB)
   for i = 0, 1 do
      local p, q = "model.layers." .. i .. ".", "h." .. i .. "."
      rows(p .. "input_layernorm.weight", q .. "ln_1.weight", 0, C)
      rows(p .. "self_attn.q_proj.weight", q .. "attn.qkv.weight", 0, HEADS * HD, true)
      rows(p .. "self_attn.k_proj.weight", q .. "attn.qkv.weight", HEADS * HD, KV * HD, true)
      rows(p .. "self_attn.v_proj.weight", q .. "attn.qkv.weight", (HEADS + KV) * HD, KV * HD)
      rows(p .. "self_attn.o_proj.weight", q .. "attn.proj.weight", 0, C)
      rows(p .. "post_attention_layernorm.weight", q .. "ln_2.weight", 0, C)
      rows(p .. "mlp.gate_proj.weight", q .. "mlp.fc.weight", 0, H)
      rows(p .. "mlp.up_proj.weight", q .. "mlp.fc.weight", H, H)
      rows(p .. "mlp.down_proj.weight", q .. "mlp.proj.weight", 0, C)
      count(1, 2, 3, 4, 5, 6, 7, 8, 9)
   end
   rows("model.norm.weight", "ln_f.weight", 0, C)
   count(1, 2)
   if not tied then
      rows("lm_head.weight", "lm_head.weight", 0, VOCAB)
      count(1)
   end
   assert.equal(expected, #order) -- no other tensor
   assert.equal("model.embed_tokens.weight", order[1])
end

-- The mean loss of a trained model on 7 fixed tokens over the real vocabulary.
local function loss_of(t) return eh.loss_of(t, VOCAB, 7) end

describe("lwopt export --format hf-llama", function()
   local dir
   before_each(function() dir = helpers.tempdir() end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   it("cuts q, k, v and gate, up out of the fused weights, turns interleaved pairs to halves, "
      .. "and reads back as the same model", function()
      for _, pairing in ipairs({ "halves", "interleaved" }) do
         local ckpt = make_checkpoint(dir .. "/ck-" .. pairing, { pairing = pairing })
         local out = dir .. "/hf-" .. pairing
         -- no --format: a LLaMA's own
         local status, said, err = run({ "export", ckpt, out })
         assert.equal(0, status, err)
         assert.matches("as hf%-llama: .* %(21 tensors, .*vocabulary 50, padding rows 50%-127 "
            .. "left out", said)
         assert.equal(pairing == "interleaved", said:find("Q and K rows turned from the "
            .. "interleaved rotary pairing", 1, true) ~= nil)
         compare(ckpt, out, pairing, false)
         local c = json.decode(helpers.slurp(out .. "/config.json"))
         local want = { model_type = "llama", vocab_size = VOCAB, hidden_size = C,
            intermediate_size = H, num_hidden_layers = 2, num_attention_heads = HEADS,
            num_key_value_heads = KV, head_dim = HD, max_position_embeddings = 8,
            rope_theta = 500000, rms_norm_eps = 1e-5, hidden_act = "silu",
            tie_word_embeddings = false, attention_bias = false, torch_dtype = "float32" }
         for k, v in pairs(want) do assert.equal(v, c[k], k) end
         assert.equal("LlamaForCausalLM", c.architectures[1])
         assert.equal(json.null, c.rope_scaling)
         -- read back (halves pairing, as transformers): the checkpoint's loss
         local notes = {}
         local back = trained.open(out .. "/model.safetensors",
            { note = function(line) notes[#notes + 1] = line end })
         assert.equal("halves", back.cfg.rope_pairing)
         assert.equal(KV, back.cfg.n_kv_head)
         assert.matches("hf-llama names", notes[1], 1, true)
         local mine, theirs = loss_of(trained.open(ckpt)), loss_of(back)
         assert.is_true(math.abs(mine - theirs) < 1e-6, ("%.9f vs %.9f"):format(mine, theirs))
      end
   end)

   it("leaves a tied head to tie_word_embeddings", function()
      local ckpt = make_checkpoint(dir .. "/ck", { tied = true })
      local status, said, err = run({ "export", ckpt, "--format", "hf-llama", dir .. "/hf" })
      assert.equal(0, status, err)
      assert.matches("tied LM head left out: transformers ties lm_head to model.embed_tokens",
         said, 1, true)
      compare(ckpt, dir .. "/hf", "halves", true)
      assert.is_true(json.decode(helpers.slurp(dir .. "/hf/config.json")).tie_word_embeddings)
      local mine = loss_of(trained.open(ckpt))
      local theirs = loss_of(trained.open(dir .. "/hf/model.safetensors"))
      assert.is_true(math.abs(mine - theirs) < 1e-6, ("%.9f vs %.9f"):format(mine, theirs))
   end)

   it("is read by --init-from into either pairing as the checkpoint's weights, bit for bit",
      function()
      local ckpt = make_checkpoint(dir .. "/ck", { pairing = "interleaved" })
      assert.equal(0, (run({ "export", ckpt, dir .. "/hf" })))
      local ours = tensors_of(ckpt .. "/model.safetensors")
      local model = lw.models.build("llama", config({ pairing = "interleaved" }))
      local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
      local line = init_from.load(dir .. "/hf/model.safetensors", { ddp = ddp,
         comm = lw.comm.self(), cfg = model.cfg, vocab = VOCAB })
      assert.matches("21 tensors by hf-llama's names (q, k, v and gate, up joined into the fused "
         .. "weights, Q and K rows turned to the interleaved pairing), F32; vocabulary rows "
         .. "50-127 (lwopt's padding) start at zero", line, 1, true)
      eh.same_weights(model, ddp, ours,
         function(name) return name:match("wte") or name:match("lm_head") end, VOCAB)
      -- GPT-2's model takes none of it
      local gpt = lw.nn.GPT.new{ n_layer = 2, n_embd = C, n_head = HEADS, vocab = ROWS,
         seq_len = 8 }
      local ok, err = pcall(init_from.load, dir .. "/hf/model.safetensors", {
         ddp = lw.ddp.new(gpt:parameters(), lw.comm.self()), comm = lw.comm.self(),
         cfg = gpt.cfg, vocab = VOCAB })
      assert.is_false(ok)
      assert.matches("a hf-llama file holds a LLaMA, and this model is a GPT-2", tostring(err),
         1, true)
   end)

   it("refuses, by name, a GPT for hf-llama, a LLaMA for GPT-2's formats and parts "
      .. "LlamaForCausalLM lacks", function()
      local ckpt = make_checkpoint(dir .. "/ck")
      for _, format in ipairs({ "hf-gpt2", "nanogpt" }) do
         local status, _, err = run({ "export", ckpt, "--format", format, dir .. "/o" })
         assert.equal(1, status)
         assert.equal("lwopt export: " .. ckpt .. " holds a LLaMA model, which --format "
            .. format .. " does not hold: use --format hf-llama\n", err)
      end
      local model = lw.nn.GPT.new{ n_layer = 1, n_embd = 16, n_head = 2, vocab = 32, seq_len = 8 }
      local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
      local gpt = lw.checkpoint.save(dir .. "/gpt", { ddp = ddp, step = 1,
         opt = lw.optim.new(ddp, { lr = 1e-2 }), extra = { n_layer = 1, n_head = 2 } })
      local status, _, err = run({ "export", gpt, "--format", "hf-llama", dir .. "/o" })
      assert.equal(1, status)
      assert.equal("lwopt export: " .. gpt .. " holds a GPT model, which --format hf-llama "
         .. "does not hold: use --format hf-gpt2 or nanogpt\n", err)
      local qk = make_checkpoint(dir .. "/qk", { qk_norm = true })
      status, _, err = run({ "export", qk, dir .. "/o" })
      assert.equal(1, status)
      assert.equal("lwopt export: " .. qk .. " cannot be written as hf-llama: its qk_norm is "
         .. "true, and LlamaForCausalLM's is false\n", err)
      assert.is_nil(io.open(dir .. "/o/config.json"))
      -- nanochat's head parts: none in LlamaForCausalLM (a pattern's short windows need a window,
      -- refused as the window)
      local names = require("lwopt.llama_names")
      assert.equal("its softcap is 15, and LlamaForCausalLM's is 0", names.unfit({ softcap = 15 }))
      assert.equal("its embed_norm is true, and LlamaForCausalLM's is false",
         names.unfit({ embed_norm = true }))
      assert.equal("its window is 768, and LlamaForCausalLM's is 0",
         names.unfit({ window = 768, window_pattern = "SSSL" }))
      assert.is_nil(names.unfit({ window_pattern = "L", softcap = 0, embed_norm = false }))
   end)
end)
