-- nanochat_names_spec.lua: `lwopt export --format nanochat` (nanochat_names.lua) and its way
-- back: every tensor of the export compared with the checkpoint's under a mapping written again
-- here (c_q, c_k, c_v rows cut out of the fused qkv; value embeddings under value_embeds.<i>;
-- the vocabulary cut to nanochat's multiple of 64; the smear gate and backout zero); meta.json;
-- the model read back by lwopt.trained and --init-from gives the checkpoint's outputs and
-- weights, and a recipe run from it starts at the exported model's loss; the refusals.
-- tests/export/check_nanochat.py checks the same against a numpy nanochat GPT.
local ffi = require("ffi")
local lw = require("lwopt")
local json = require("lwopt.json")
local weights = require("lwopt.weights")
local safetensors = require("lwopt.safetensors")
local export = require("lwopt.export")
local trained = require("lwopt.trained")
local init_from = require("lwopt.init_from")
local helpers = require("helpers")
local fh = require("foreign_helpers")
local eh = require("export_helpers")
local run, tensors_of = eh.run, eh.tensors_of

-- C 32, 4 heads of 8, 2 KV heads, 3 layers (value embeddings on 0 and 2); the tokenizer's 300
-- tokens in lwopt's 384 rows and nanochat's 320.
local C, HEADS, KV, HD, LAYERS, VOCAB, ROWS, NC_ROWS = 32, 4, 2, 8, 3, 300, 384, 320

-- The lw.models nanochat config of the test model, with o's fields over it.
local function config(o)
   local cfg = { n_layer = LAYERS, n_embd = C, n_head = HEADS, n_kv_head = KV, vocab = ROWS,
      seq_len = 16 }
   for k, v in pairs(o or {}) do cfg[k] = v end
   return lw.models.config("nanochat", cfg)
end

-- A checkpoint in dir of that model (o: fields changed; vocab: the tokenizer's, default
-- VOCAB), every value different, with the settings an --arch nanochat run records.
local function make_checkpoint(dir, o, vocab)
   local cfg = config(o)
   vocab = vocab or VOCAB
   return eh.checkpoint(dir, "nanochat", cfg, { arch = "nanochat", model = cfg,
      n_layer = cfg.n_layer, n_embd = C, n_head = HEADS, vocab = vocab, seq = cfg.seq_len,
      data_kind = vocab == 256 and "bytes" or "tokens" }, 0.4, 0.01), cfg
end

-- Every tensor of the export at out equals the checkpoint's under the mapping.
local function compare(ckpt, out)
   local ours = tensors_of(ckpt .. "/model.safetensors")
   local theirs, order = tensors_of(out .. "/model.safetensors")
   local count = 0
   local function rows(name, from, first, n)
      local t, o = theirs[name], ours[from]
      assert.is_not_nil(t, name)
      local w = o.shape[2] or 1
      assert.same(w == 1 and { n } or { n, w }, t.shape, name)
      for k = 0, n * w - 1 do assert.equal(o.data[first * w + k], t.data[k], name) end
      count = count + 1
   end
   local function zeros(name, shape)
      assert.same(shape, theirs[name].shape, name)
      for k = 0, weights.numel(shape) - 1 do assert.equal(0, theirs[name].data[k], name) end
      count = count + 1
   end
   rows("transformer.wte.weight", "wte.weight", 0, NC_ROWS)
   for i = 0, LAYERS - 1 do
      local p, q = "transformer.h." .. i .. ".", "h." .. i .. "."
      rows(p .. "attn.c_q.weight", q .. "attn.qkv.weight", 0, HEADS * HD)
      rows(p .. "attn.c_k.weight", q .. "attn.qkv.weight", HEADS * HD, KV * HD)
      rows(p .. "attn.c_v.weight", q .. "attn.qkv.weight", (HEADS + KV) * HD, KV * HD)
      rows(p .. "attn.c_proj.weight", q .. "attn.proj.weight", 0, C)
      rows(p .. "mlp.c_fc.weight", q .. "mlp.fc.weight", 0, 4 * C)
      rows(p .. "mlp.c_proj.weight", q .. "mlp.proj.weight", 0, C)
      if i ~= 1 then
         rows(p .. "attn.ve_gate.weight", q .. "attn.ve_gate.weight", 0, KV)
         rows("value_embeds." .. i .. ".weight", q .. "attn.ve.weight", 0, NC_ROWS)
      end
   end
   rows("lm_head.weight", "lm_head.weight", 0, NC_ROWS)
   rows("resid_lambdas", "resid_lambdas", 0, LAYERS)
   rows("x0_lambdas", "x0_lambdas", 0, LAYERS)
   zeros("smear_gate.weight", { 1, 24 })
   zeros("smear_lambda", { 1 })
   zeros("backout_lambda", { 1 })
   assert.equal(count, #order) -- no other tensor
end

-- The mean loss of a trained model on 9 fixed tokens over the real vocabulary (nanochat crops
-- its logits to it).
local function loss_of(t) return eh.loss_of(t, VOCAB, 9) end

describe("lwopt export --format nanochat", function()
   local dir
   before_each(function() dir = helpers.tempdir() end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   it("writes nanochat's names and meta.json, and reads back as the same model", function()
      local ckpt = make_checkpoint(dir .. "/ck")
      -- no --format: a nanochat model's own
      local status, said, err = run({ "export", ckpt, dir .. "/nc" })
      assert.equal(0, status, err)
      assert.matches("as nanochat: .* %(29 tensors, .*vocabulary 300 in nanochat's 320 rows, "
         .. "lwopt's padding rows 320%-383 left out; smear gate and backout scalar zero", said)
      compare(ckpt, dir .. "/nc")
      local meta = json.decode(helpers.slurp(dir .. "/nc/meta.json"))
      assert.same({ sequence_len = 16, vocab_size = VOCAB, n_layer = LAYERS, n_head = HEADS,
         n_kv_head = KV, n_embd = C, window_pattern = "SSSL" }, meta.model_config)
      assert.equal(1, meta.step)
      local notes = {}
      local back = trained.open(dir .. "/nc/model.safetensors",
         { note = function(line) notes[#notes + 1] = line end })
      assert.equal("nanochat", back.arch)
      assert.equal(KV, back.cfg.n_kv_head)
      assert.equal("SSSL", back.cfg.window_pattern)
      assert.matches("nanochat names", notes[1], 1, true)
      local mine, theirs = loss_of(trained.open(ckpt)), loss_of(back)
      assert.is_true(math.abs(mine - theirs) < 1e-6, ("%.9f vs %.9f"):format(mine, theirs))
   end)

   it("is read by --init-from as the checkpoint's weights, bit for bit", function()
      local ckpt, cfg = make_checkpoint(dir .. "/ck")
      assert.equal(0, (run({ "export", ckpt, dir .. "/nc" })))
      local ours = tensors_of(ckpt .. "/model.safetensors")
      local model = lw.models.build("nanochat", cfg)
      local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
      local line = init_from.load(dir .. "/nc/model.safetensors", { ddp = ddp,
         comm = lw.comm.self(), cfg = model.cfg, vocab = VOCAB })
      assert.matches("29 tensors by nanochat's names (c_q, c_k and c_v joined into the fused "
         .. "weights; its zero smear gate and backout left out), F32; vocabulary rows 320-383 "
         .. "(lwopt's padding) start at zero", line, 1, true)
      eh.same_weights(model, ddp, ours, function(name)
         return name == "wte.weight" or name == "lm_head.weight" or name:match("attn%.ve%.weight$")
      end, NC_ROWS)
      -- a LLaMA's model and GPT-2's take none of it
      for _, other in ipairs({
         { lw.models.build("llama", lw.models.config("llama", { n_layer = 1, n_embd = C,
           n_head = HEADS, vocab = ROWS, seq_len = 16 })), "this model is a LLaMA" },
         { lw.nn.GPT.new{ n_layer = 1, n_embd = C, n_head = HEADS, vocab = ROWS, seq_len = 16 },
           "this model is a GPT-2" },
      }) do
         local ok, err = pcall(init_from.load, dir .. "/nc/model.safetensors", {
            ddp = lw.ddp.new(other[1]:parameters(), lw.comm.self()), comm = lw.comm.self(),
            cfg = other[1].cfg, vocab = VOCAB })
         assert.is_false(ok)
         assert.matches("a nanochat file holds a nanochat model, and " .. other[2],
            tostring(err), 1, true)
      end
   end)

   it("starts a recipe run (--init-from, --arch nanochat) at the exported model's loss",
      function()
      local d, text = fh.dir_with_text()
      local ckpt = make_checkpoint(d .. "/ck", { window_pattern = "SL" }, 256)
      export.run({ ckpt = ckpt, out_dir = d .. "/nc" })
      local file = d .. "/nc/model.safetensors"
      local out, status = helpers.sh("luajit recipes/gpt_small.lua --preset tiny --arch "
         .. "nanochat --sample 0 --quiet --data " .. text .. " --init-from " .. file
         .. " --warmup 1 --batch 4 --steps 1 --log " .. d .. "/log.jsonl")
      local ok, err = pcall(function()
         assert.equal(0, status, out)
         assert.matches("the model's shape is " .. file .. "'s (nanochat names): 3 layers x 32, "
            .. "4 heads (2 KV), sequence 16, vocabulary 256, window pattern SL\n", out, 1, true)
         -- step 1's loss is the file's model's on the run's first batch (batch 4, seed 1337)
         local t = fh.check_first_step(d .. "/log.jsonl", file, text, 4, 16)
         assert.equal("SL", t.cfg.window_pattern)
      end)
      os.execute("rm -rf " .. d)
      assert(ok, err)
   end)

   it("refuses, by name, the other architectures, the other formats and parts nanochat's GPT "
      .. "lacks", function()
      local ckpt = make_checkpoint(dir .. "/ck")
      for _, format in ipairs({ "hf-gpt2", "nanogpt", "hf-llama" }) do
         local status, _, err = run({ "export", ckpt, "--format", format, dir .. "/o" })
         assert.equal(1, status)
         assert.equal("lwopt export: " .. ckpt .. " holds a nanochat model, which --format "
            .. format .. " does not hold: use --format nanochat\n", err)
      end
      local gpt = fh.model_files(dir, true)
      local status, _, err = run({ "export", gpt, "--format", "nanochat", dir .. "/o" })
      assert.equal(1, status)
      assert.equal("lwopt export: " .. gpt .. " holds a GPT model, which --format nanochat "
         .. "does not hold: use --format hf-gpt2 or nanogpt\n", err)
      for _, case in ipairs({
         { { softcap = 0 }, "its softcap is 0, and nanochat's is 15" },
         { { rope_base = 10000 }, "its rope_base is 10000, and nanochat's is 100000" },
         { { qk_norm = false }, "its qk_norm is false, and nanochat's is true" },
         { { n_expert = 4 }, "its n_expert is 4, and nanochat's is 0" },
         { { window = 64 }, "its short window is 64, and nanochat's for a sequence of 16 is 128 (a "
           .. "quarter, rounded up to 128)" },
      }) do
         local odd = make_checkpoint(dir .. "/odd", case[1])
         status, _, err = run({ "export", odd, dir .. "/o" })
         os.execute("rm -rf " .. dir .. "/odd")
         assert.equal(1, status)
         assert.equal("lwopt export: " .. odd .. " cannot be written as nanochat: " .. case[2]
            .. "\n", err)
      end
      assert.is_nil(io.open(dir .. "/o/meta.json"))
      -- the default window follows the sequence as nanochat's does (600: 256)
      local long = make_checkpoint(dir .. "/long", { seq_len = 600 })
      status, _, err = run({ "export", long, dir .. "/o" })
      assert.equal(0, status, err)
   end)

   it("refuses a file whose smear gate is on or whose meta says another vocabulary", function()
      local ckpt = make_checkpoint(dir .. "/ck")
      export.run({ ckpt = ckpt, out_dir = dir .. "/nc" })
      local st = tensors_of(dir .. "/nc/model.safetensors")
      local _, order = tensors_of(dir .. "/nc/model.safetensors")
      local function rewrite(path, change, meta)
         local list = {}
         for _, name in ipairs(order) do
            list[#list + 1] = { name = name, shape = st[name].shape,
               data = change[name] or st[name].data }
         end
         os.execute("mkdir -p " .. path)
         safetensors.write(path .. "/model.safetensors", list)
         local h = assert(io.open(path .. "/meta.json", "wb"))
         h:write(json.encode(meta))
         h:close()
         return path .. "/model.safetensors"
      end
      local meta = json.decode(helpers.slurp(dir .. "/nc/meta.json"))
      local on = ffi.new("float[1]", 0.5)
      local smear = rewrite(dir .. "/smear", { smear_lambda = on }, meta)
      local ok, err = pcall(trained.open, smear)
      assert.is_false(ok)
      assert.matches("'smear_lambda' is not zero (0.5), and lwopt's nanochat model has no smear "
         .. "gate or backout", tostring(err), 1, true)
      meta.model_config.vocab_size = 400
      local wide = rewrite(dir .. "/wide", {}, meta)
      ok, err = pcall(trained.open, wide)
      assert.is_false(ok)
      assert.matches("its vocab_size 400 pads to 448 rows (a multiple of 64), and its "
         .. "transformer.wte has 320", tostring(err), 1, true)
   end)
end)
