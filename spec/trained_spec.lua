-- trained_spec.lua: lwopt.trained on bare .safetensors files the spec writes: the model's
-- configuration read from the tensors' shapes (dense and mixture of experts), what the shapes
-- cannot say taken from a preset or asked for by flag, the parameters loaded as written, and
-- the errors for paths that hold no model and data of the other kind. Checkpoints written by
-- the recipe: cli_sample_spec.lua and cli_eval_spec.lua.
local ffi = require("ffi")
local helpers = require("helpers")
local lw = require("lwopt")
local trained = require("lwopt.trained")
local safetensors = require("lwopt.safetensors")

-- Writes the parameters of lw.nn.GPT(cfg), element i of every tensor (i + 1) / 1000 plus its
-- index among the tensors, to a temporary .safetensors file; returns its path. o: nil (F32),
-- { dtype = "BF16" | "F16", bits = a list of 16-bit patterns } to write those patterns in turn
-- instead, or { dtype = "I32" } to label those F32 bytes I32.
local function model_file(cfg, o)
   local tensors = {}
   local half = o and (o.dtype == "BF16" or o.dtype == "F16")
   for k, spec in ipairs(lw.nn.GPT.new(cfg):parameters()) do
      local n = lw.arch.numel({ spec })
      local data = ffi.new(half and "uint16_t[?]" or "float[?]", n)
      for i = 0, n - 1 do
         data[i] = half and o.bits[i % #o.bits + 1] or k + (i % 1000 + 1) / 1000
      end
      tensors[#tensors + 1] = { name = spec.name, shape = spec.shape, data = data,
         dtype = o and o.dtype }
   end
   local path = os.tmpname() .. ".safetensors"
   safetensors.write(path, tensors)
   return path
end

local TINY = { n_layer = 4, n_embd = 64, n_head = 4, vocab = 256, seq_len = 32, tied = true }

local function with(base, changes)
   local out = {}
   for k, v in pairs(base) do out[k] = v end
   for k, v in pairs(changes) do out[k] = v end
   return out
end

-- trained.open's error for path with options o.
local function open_error(path, o)
   local ok, err = pcall(trained.open, path, o)
   assert.is_false(ok)
   return tostring(err)
end

describe("lwopt.trained", function()
   local keep = helpers.temp_paths(after_each)
   local function file(cfg, o) return keep(model_file(cfg, o)) end

   it("reads a bare file's model from its shapes, the heads from the preset of that shape",
      function()
         local notes = {}
         local t = trained.open(file(TINY), { note = function(s) notes[#notes + 1] = s end })
         assert.same({ 4, 64, 4, 256, 32 }, { t.cfg.n_layer, t.cfg.n_embd, t.cfg.n_head,
            t.cfg.vocab, t.cfg.seq_len })
         assert.same({ "4 heads: --preset tiny's, which has 4 layers x 64 (--n-head to change)" },
            notes)
         assert.same({ "bytes", 256, 32, 1337, 8, 64 }, { t.settings.kind, t.settings.vocab,
            t.settings.seq, t.settings.seed, t.settings.batch, t.settings.eval_max })
         assert.is_nil(t.step)
         assert.equal("GPT 4 layers x 64, 4 heads, sequence 32, bytes", trained.describe(t))
         -- the parameters as written: tensor 4 is h.0.attn.qkv.weight
         local w = t.ddp:read_param("h.0.attn.qkv.weight")
         assert.same({ 192, 64 }, w.shape)
         assert.equal(ffi.new("float", 4 + 0.001), w.data[0])
         assert.equal(ffi.new("float", 4 + 0.999), w.data[998])
         -- the GPT's forward pass runs on it
         local tokens = ffi.new("int32_t[32]")
         t.model:forward(tokens, nil, 1, 32)
      end)

   it("reads BF16 and F16 files as --init-from does, widened to fp32 exactly", function()
      -- bit patterns and their values: 1, -2, 3.140625 in bfloat16; 1, 1/3 rounded, 2^-24,
      -- 65504 in half
      local cases = {
         BF16 = { { 0x3f80, 1 }, { 0xc000, -2 }, { 0x4049, 3.140625 }, { 0x0000, 0 } },
         F16 = { { 0x3c00, 1 }, { 0x3555, 0.333251953125 }, { 0x0001, 2 ^ -24 },
                 { 0x7bff, 65504 } },
      }
      for dtype, list in pairs(cases) do
         local bits = {}
         for i, pair in ipairs(list) do bits[i] = pair[1] end
         local t = trained.open(file(TINY, { dtype = dtype, bits = bits }), {})
         for _, spec in ipairs(t.ddp.specs) do
            local p = t.ddp:read_param(spec.name)
            for i = 0, lw.arch.numel({ spec }) - 1 do
               assert.equal(list[i % #list + 1][2], p.data[i], dtype .. " " .. spec.name)
            end
         end
      end
      -- a dtype that is not a float is refused by name, as --init-from refuses it
      local path = file(TINY, { dtype = "I32" })
      assert.equal(path .. ": 'wte.weight' is I32; F32, BF16 and F16 tensors are read",
         open_error(path, {}))
   end)

   it("takes GPT-2's vocabulary for 50304 rows, and --vocab for other rows", function()
      local notes = {}
      local t = trained.open(file(with(TINY, { vocab = 50304, seq_len = 8 })),
         { note = function(s) notes[#notes + 1] = s end })
      assert.same({ "tokens", 50257 }, { t.settings.kind, t.settings.vocab })
      assert.matches("vocabulary 50257 (GPT-2's), padded to the model's 50304 rows", notes[2], 1,
         true)
      local path = file(with(TINY, { vocab = 384 }))
      assert.equal(path .. ": the token vocabulary is not in the tensors' shapes (the model has "
         .. "384 rows, the vocabulary padded to a multiple of 128): give --vocab",
         open_error(path, {}))
      assert.equal("--vocab 1000 pads to 1024 rows, but the model has 384",
         open_error(path, { vocab = 1000 }))
      t = trained.open(path, { vocab = 300 })
      assert.same({ "tokens", 300 }, { t.settings.kind, t.settings.vocab })
      assert.equal("GPT 4 layers x 64, 4 heads, sequence 32, vocabulary 300 (384 rows)",
         trained.describe(t))
   end)

   it("asks for --n-head when no preset has the model's shape", function()
      local path = file(with(TINY, { n_layer = 3, n_embd = 48, n_head = 6 }))
      assert.equal(path .. ": the number of attention heads is not in the tensors' shapes and no "
         .. "preset has 3 layers x 48: give --n-head", open_error(path, {}))
      assert.equal("--n-head 5 does not divide the width 48", open_error(path, { n_head = 5 }))
      assert.equal(6, trained.open(path, { n_head = 6 }).cfg.n_head)
   end)

   it("reads a mixture of experts: experts, their width and a shared expert", function()
      local cfg = with(TINY, { n_expert = 4, shared_expert = true })
      local t = trained.open(file(cfg), {})
      assert.same({ 4, 256, true, 2 }, { t.cfg.n_expert, t.cfg.expert_hidden,
         t.cfg.shared_expert, t.cfg.topk })
      assert.equal(3, trained.open(file(cfg), { topk = 3 }).cfg.topk)
      assert.equal("GPT 4 layers x 64, 4 heads, sequence 32, bytes, 4 experts, top-2",
         trained.describe(t))
   end)

   it("names a path that holds no model", function()
      assert.equal("/nonexistent/ckpt does not exist", open_error("/nonexistent/ckpt", {}))
      local dir = helpers.tempdir()
      assert.equal(dir .. " is not a checkpoint (it has no manifest.json) and holds none (" .. dir
         .. " holds no checkpoint)", open_error(dir, {}))
      helpers.sh("rm -rf " .. dir)
      local text = helpers.tempfile("not a model")
      assert.matches("^" .. text:gsub("%p", "%%%0"), open_error(text, {}))
      os.remove(text)
      -- a safetensors file of something else than a GPT
      local other = os.tmpname()
      safetensors.write(other, { { name = "w", count = 4, data = ffi.new("float[4]") } })
      assert.equal(other .. " holds no GPT of lwopt's (no wte.weight and wpe.weight matrices)",
         open_error(other, {}))
      os.remove(other)
   end)

   it("rebuilds nanochat's head parts from the model config a checkpoint records", function()
      -- the config the recipe records (lw.models.config: every field, defaults filled), with
      -- the softcap, the embedding norm and a window pattern set; the checkpoint's model gives
      -- the saved model's loss, which each of the three changes
      local cfg = { n_layer = 2, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 256,
         seq_len = 8, softcap = 1.5, embed_norm = true, window = 2, window_pattern = "SL" }
      local tokens, targets = ffi.new("int32_t[8]"), ffi.new("int32_t[8]")
      for i = 0, 7 do tokens[i], targets[i] = (i * 37 + 5) % 256, (i * 11 + 3) % 256 end
      local function loss_of(c)
         local model = lw.models.build("llama", c)
         local specs = lw.route(model:parameters(), { { match = ".", optimizer = "adamw" } })
         local ddp = lw.ddp.new(specs, lw.comm.self())
         for _, s in ipairs(model:parameters()) do
            local seed = 0 -- by name: a model without ln_e holds the others' values
            for ch in s.name:gmatch(".") do seed = seed + ch:byte() end
            ddp:param(s.name):copy(function(k)
               return (s.role == "norm" and 1 or 0) + 0.4 * math.sin(seed + k)
            end)
         end
         model:bind(ddp, nil)
         return model:forward(tokens, targets, 1, 8), ddp
      end
      local want, ddp = loss_of(cfg)
      local dir = helpers.fresh_path()
      lw.checkpoint.save(dir, { ddp = ddp, opt = lw.optim.new(ddp, { lr = 1e-2 }), step = 1,
         extra = { arch = "llama", model = lw.models.config("llama", cfg), n_layer = 2,
            n_embd = 16, n_head = 4, vocab = 256, seq = 8, data_kind = "bytes" } })
      local t = trained.open(dir, { comm = lw.comm.self() })
      assert.same({ 1.5, true, 2, "SL" }, { t.cfg.softcap, t.cfg.embed_norm, t.cfg.window,
         t.cfg.window_pattern })
      assert.equal(want, t.model:forward(tokens, targets, 1, 8))
      for _, change in ipairs({ { softcap = 0 }, { embed_norm = false },
         { window_pattern = "L" } }) do
         assert.are_not.equal(want, (loss_of(with(cfg, change))))
      end
      helpers.sh("rm -rf " .. dir)
   end)

   it("opens data as the recipe does, refusing the other kind than the model's", function()
      local bytes = { kind = "bytes", vocab = 256, seq = 8 }
      local text = helpers.tempfile(("abcdefgh"):rep(100))
      local data = trained.open_data(text, bytes)
      assert.same({ "bytes", 800, 40 }, { data.kind, data.n, data.n_val })
      local ok, err = pcall(trained.open_data, "/tmp/x_train_*.bin", bytes)
      assert.is_false(ok)
      assert.equal("--data /tmp/x_train_*.bin is token shards, but the model was trained on bytes "
         .. "of a text file", err)
      ok, err = pcall(trained.open_data, text, { kind = "tokens", vocab = 300, seq = 8 })
      assert.is_false(ok)
      assert.equal("--data " .. text .. " is a text file (read as bytes), but the model was "
         .. "trained on token shards (a .bin path or pattern)", err)
      os.remove(text)
   end)
end)
