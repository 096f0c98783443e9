-- trained.lua: a trained GPT for the commands that use one after training (sample and eval; their
-- runner is app/cli_trained.lua): read from a checkpoint (a step-N directory, or a --ckpt-dir whose
-- `latest` names one), whose manifest records the recipe's settings, or from a bare .safetensors
-- file (F32, BF16 or F16, read as --init-from reads them) in lwopt's names (--save-params, its
-- settings in the metadata; a checkpoint's model.safetensors, its manifest beside it) or another
-- program's (hf-gpt2, nanogpt: foreign.lua, its settings in a config), whose tensors' shapes give
-- the model and whose records, else flags, what shapes cannot (the heads, the token vocabulary); a
-- flag that contradicts a record is refused. An hf-llama file (transformers' LlamaForCausalLM)
-- gives an --arch llama model, a nanochat file an --arch nanochat one. The model is built and
-- loaded on every rank of the job (one without mpirun) on the CPU or a GPU, and the data it was
-- trained on is opened as the recipe opens it. It does not train or write anything.
local lw = require("lwopt")
local files = require("lwopt.files")
local checkpoint = require("lwopt.checkpoint")
local weights = require("lwopt.weights")
local foreign = require("lwopt.foreign")
local sampling = require("lwopt.sampling")
local presets = require("lwopt.presets")
local data_mod = require("lwopt.data")
local tokens_mod = require("lwopt.tokens")

local ffi = require("ffi")
local errors = require("lwopt.errors")

local trained = {}

-- The settings of a bare file that the recipe's defaults give: its --seed and --batch, the
-- validation sequences of an evaluation (--eval-max).
trained.DEFAULTS = { seed = 1337, batch = 8, eval_max = 64,
   topk = presets.MOE_DEFAULTS.topk }

local fail = errors.failer(nil)

-- What path names: "checkpoint" and its directory (a --ckpt-dir's: the one `latest` names, or
-- when that is damaged the newest whole one of its run, with the note that says so), or
-- "safetensors" and the file.
local function resolve(path)
   local kind = files.kind(path)
   if kind == "missing" then fail("%s does not exist", path) end
   if kind == "file" then return "safetensors", path end
   if kind ~= "dir" then
      fail("%s is neither a checkpoint directory nor a .safetensors file", path)
   end
   if files.kind(path .. "/manifest.json") ~= "missing" then return "checkpoint", path end
   local found, why = checkpoint.find(path, {})
   if found == nil then
      fail("%s is not a checkpoint (it has no manifest.json) and holds none (%s)", path, why)
   end
   return "checkpoint", found.path, found.note
end

-- The tensors of a weights file (weights.open's): { { name, shape } ... }, in the file's order.
local function tensors_of(f)
   local out = {}
   for _, name in ipairs(f.order) do out[#out + 1] = { name = name, shape = f.shapes[name] } end
   return out
end

-- The GPT's sizes that parameters' names and shapes give (lw.nn.GPT's names): layers, width,
-- vocabulary rows, sequence length, the MLP's or the experts' sizes, whether the LM head is
-- tied and whether there are biases. params: { { name, shape } ... }; where names them.
local function shape_config(params, where)
   local by = {}
   for _, p in ipairs(params) do by[p.name] = p.shape end
   local wte, wpe = by["wte.weight"], by["wpe.weight"]
   if not (wte and wpe and #wte == 2 and #wpe == 2) then
      fail("%s holds no GPT of lwopt's (no wte.weight and wpe.weight matrices)", where)
   end
   local cfg = { n_embd = wte[2], vocab = wte[1], seq_len = wpe[1], n_layer = 0,
                 tied = by["lm_head.weight"] == nil, bias = by["ln_f.bias"] ~= nil }
   for name in pairs(by) do
      local i = tonumber(name:match("^h%.(%d+)%."))
      if i then cfg.n_layer = math.max(cfg.n_layer, i + 1) end
   end
   local router, fc = by["h.0.moe.router.weight"], by["h.0.moe.experts.0.fc.weight"]
   if router and fc then
      cfg.n_expert, cfg.expert_hidden = router[1], fc[1]
      cfg.shared_expert = by["h.0.moe.shared.fc.weight"] ~= nil
   elseif by["h.0.mlp.fc.weight"] then
      cfg.mlp_hidden = by["h.0.mlp.fc.weight"][1]
   end
   if cfg.n_layer == 0 then fail("%s holds no GPT of lwopt's (no layer h.0)", where) end
   return cfg
end

-- A setting the checkpoint or file records (saved, or nil) or its flag gives (given; the flag's
-- name); fallback() when neither does. A flag that contradicts the record is refused, naming
-- both values: whose(saved) says where the record's is (default: the checkpoint's model).
local function setting(saved, given, flag, fallback, whose)
   if saved ~= nil and given ~= nil and saved ~= given then
      fail("%s %s: %s", flag, tostring(given), whose and whose(saved) or ("the checkpoint's "
         .. "model has %s (the flag is for a bare .safetensors file)"):format(tostring(saved)))
   end
   if saved ~= nil then return saved end
   if given ~= nil then return given end
   return fallback()
end

-- The preset whose layers and width are cfg's, or nil.
local function preset_of(cfg)
   for _, name in ipairs({ "tiny", "small", "wide", "gpt2", "moe" }) do
      local p = presets.presets[name]
      if p.n_layer == cfg.n_layer and p.n_embd == cfg.n_embd then return name, p end
   end
end

-- The model's whole configuration and the run's settings (kind "bytes" | "tokens", vocab, seq,
-- seed, batch, eval_max, bytes_seen, data), from the parameters' shapes, the checkpoint's
-- recorded settings (extra; what a bare file records, else {}) and the flags (o), saying what
-- is missing. whose: nil for a checkpoint, else { key = function(value) -> where a bare file
-- records it }.
local function configure(params, extra, o, where, whose)
   whose = whose or {}
   -- a model other than GPT-2's is built from the config its checkpoint records (lw.models)
   local arch, cfg = extra.arch or "gpt", nil
   if arch ~= "gpt" then
      if type(extra.model) ~= "table" then
         fail("%s: a %s model, but no config of it is recorded", where, tostring(arch))
      end
      cfg = {}
      for k, v in pairs(extra.model) do cfg[k] = v end
   else
      cfg = shape_config(params, where)
   end
   local recorded = extra.n_layer ~= nil
   cfg.n_head = setting(extra.n_head, o.n_head, "--n-head", function()
      local name, p = preset_of(cfg)
      if p == nil then
         fail("%s: the number of attention heads is not in the tensors' shapes and no preset has "
            .. "%d layers x %d: give --n-head", where, cfg.n_layer, cfg.n_embd)
      end
      o.note(("%d heads: --preset %s's, which has %d layers x %d (--n-head to change)")
         :format(p.n_head, name, cfg.n_layer, cfg.n_embd))
      return p.n_head
   end, whose.n_head)
   if cfg.n_embd % cfg.n_head ~= 0 then
      fail("--n-head %d does not divide the width %d", cfg.n_head, cfg.n_embd)
   end
   local rows = cfg.vocab
   local vocab = setting(extra.vocab or (recorded and 256 or nil), o.vocab, "--vocab", function()
      if rows == 256 then return 256 end
      if rows == presets.vocab_rows(tokens_mod.GPT2_VOCAB) then
         o.note(("vocabulary %d (GPT-2's), padded to the model's %d rows (--vocab to change)")
            :format(tokens_mod.GPT2_VOCAB, rows))
         return tokens_mod.GPT2_VOCAB
      end
      fail("%s: the token vocabulary is not in the tensors' shapes (the model has %d rows, the "
         .. "vocabulary padded to a multiple of %d): give --vocab", where, rows,
         presets.VOCAB_MULTIPLE)
   end, whose.vocab)
   if presets.vocab_rows(vocab) ~= rows then
      fail("--vocab %d pads to %d rows, but the model has %d", vocab,
         presets.vocab_rows(vocab), rows)
   end
   if cfg.n_expert then
      cfg.topk = setting(extra.topk, o.topk, "--topk", function() return trained.DEFAULTS.topk end,
         whose.topk)
      cfg.aux_coef = extra.aux_coef
   end
   -- a checkpoint recording no kind of data was trained on bytes (before token data existed)
   local kind = extra.data_kind or (recorded and "bytes")
      or (vocab == 256 and "bytes" or "tokens")
   local settings = { kind = kind, vocab = vocab, seq = cfg.seq_len,
      seed = extra.seed or trained.DEFAULTS.seed, batch = extra.batch or trained.DEFAULTS.batch,
      eval_max = extra.eval_max or trained.DEFAULTS.eval_max,
      bytes_seen = sampling.bytes_of_mask(extra.bytes_seen), data = extra.data }
   return cfg, settings, arch
end

-- A refusal's source of a setting: "path records value (from)".
local function records(path, from)
   return function(value) return ("%s records %s (%s)"):format(path, value, from) end
end

-- Copies a bare file's parameters into ddp: every name and shape checked against the model's
-- first, F32, BF16 and F16 widened to fp32 as --init-from and `lwopt export` read them.
local function load_file(f, ddp, path)
   weights.check(f, weights.names_and_shapes(ddp.specs), path, "lwopt's names")
   for _, spec in ipairs(ddp.specs) do
      local data = weights.read(f, spec.name)
      ddp:with_param(spec.name, function(t) ffi.copy(t.data, data, 4 * t.numel) end)
   end
end

-- A bare hf-llama file, open, as bare_file says: the LLaMA its shapes and config give (the
-- lw.models config recorded as a checkpoint records it), its heads and tokenizer's vocabulary.
local function llama_file(f, path)
   local c, plan = foreign.llama(f, path)
   local model = {}
   for k, x in pairs(c) do model[k] = x end
   model.real_vocab = nil
   local params = weights.names_and_shapes(lw.models.specs("llama", model))
   local _, from = foreign.config(f)
   local whose = records(path, from)
   return { f = f, fmt = "hf-llama", params = params, plan = plan, whose = { n_head = whose,
      vocab = function(value)
         return ("%s holds %d tokens (its token embedding's rows)"):format(path, value)
      end }, extra = { n_head = c.n_head, vocab = c.real_vocab, arch = "llama", model = model } }
end

-- A bare nanochat file, open, as bare_file says: the model its shapes and meta give.
local function nanochat_file(f, path)
   local c, plan = foreign.nanochat(f, path)
   local model = { n_layer = c.n_layer, n_embd = c.n_embd, n_head = c.n_head,
      n_kv_head = c.n_kv_head, vocab = c.vocab, seq_len = c.seq_len,
      window_pattern = c.window_pattern }
   local params = weights.names_and_shapes(lw.models.specs("nanochat", model))
   local _, from = foreign.config(f)
   local whose = records(path, from)
   return { f = f, fmt = "nanochat", params = params, plan = plan,
      whose = { n_head = whose, vocab = whose },
      extra = { n_head = c.n_head, vocab = c.real_vocab, arch = "nanochat", model = model } }
end

-- A bare file, open: { f, fmt ("lwopt", "hf-gpt2" or "nanogpt"), params (lwopt's names and
-- shapes), extra (the settings it records, in a manifest's words), whose (where it records each,
-- for refusals), plan (another format's entries by lwopt parameter, foreign.plan's) }.
local function bare_file(path)
   local f = foreign.view(weights.open(path, path))
   local fmt = foreign.format(f)
   local function recorded_in(from)
      local whose = records(path, from)
      return { n_head = whose, vocab = whose, topk = whose }
   end
   if fmt == "lwopt" then
      local extra, from = foreign.recorded(f, fmt)
      -- a checkpoint's model.safetensors: its manifest beside it records the run's settings
      local manifest = files.dirname(path) .. "/manifest.json"
      if from == nil and files.kind(manifest) == "file" then
         local ok, m = pcall(checkpoint.read_manifest, files.dirname(path), { files = false })
         if ok and m.extra then extra, from = m.extra, manifest end
      end
      return { f = f, fmt = fmt, params = tensors_of(f), extra = extra,
               whose = from and recorded_in(from) }
   end
   if fmt == "hf-llama" then return llama_file(f, path) end
   if fmt == "nanochat" then return nanochat_file(f, path) end
   local c = foreign.shape(f, fmt, path)
   local plan = foreign.plan(f, fmt, c, path)
   local params = lw.arch.gpt{ n_layer = c.n_layer, n_embd = c.n_embd, n_head = 1,
      vocab = c.rows, seq_len = c.seq_len, tied = c.tied, bias = c.bias,
      mlp_hidden = c.mlp_hidden }
   local rec, from = foreign.recorded(f, fmt)
   local whose = recorded_in(from)
   -- the vocabulary of an hf-gpt2 file is its token embedding's rows, unpadded
   if c.vocab then
      whose.vocab = function(value)
         return ("%s holds %d tokens (its token embedding's rows)"):format(path, value)
      end
   end
   return { f = f, fmt = fmt, params = params, plan = plan, bias = c.bias, whose = whose,
            extra = { n_head = rec.n_head, vocab = c.vocab } }
end

-- trained.open(path, o): the model at path (a checkpoint directory, a --ckpt-dir, or a
-- .safetensors file) on every rank of comm, ready for forward passes. o: comm (default the
-- world), device ("cpu" default, "cuda", "cuda:N"), n_head, vocab, topk (what a bare file
-- cannot say), note (a function taking a line for the user: what was assumed or chosen).
-- Returns { path (the checkpoint directory or the file), step (nil for a file), model, ddp, cfg,
-- settings = { kind, vocab, seq, seed, batch, eval_max, bytes_seen (nil unless recorded),
-- data (the checkpoint's words for its data, or nil) }, param_dtype }. Errors name the path
-- and what is missing or wrong.
function trained.open(path, o)
   o = o or {}
   o.note = o.note or function() end
   local comm = o.comm or lw.comm.init()
   local what, where, note = resolve(path)
   if note then o.note(note) end
   local m, b, params
   if what == "checkpoint" then
      m = checkpoint.read_manifest(where, { files = false })
      params = m.params
   else
      b = bare_file(where)
      params = b.params
      if b.fmt == "hf-llama" then
         o.note("hf-llama names: q, k, v and gate, up joined into lwopt's fused weights")
      elseif b.fmt == "nanochat" then
         o.note("nanochat names: c_q, c_k and c_v joined into lwopt's fused weights")
      elseif b.plan then
         o.note(("%s names: %s%s"):format(b.fmt, b.fmt == "hf-gpt2" and "Conv1D weights "
            .. "transposed back, " or "", b.bias and "biases kept" or "no biases"))
      end
   end
   local extra = m and m.extra or b.extra
   -- a model of a models file is known once that file is loaded (--models): never loaded here
   if extra and extra.arch then
      lw.models.recorded(extra.arch, (what == "checkpoint" and "checkpoint " or "") .. where,
         extra.models_file)
   end
   local cfg, settings, arch = configure(params, extra, o, where, b and b.whose)
   local model = lw.models.build(arch, cfg)
   -- no optimizer: every parameter in AdamW's buffers, which take any shape; the forward pass
   -- is the same whatever the routing
   local specs = lw.route(model:parameters(), { { match = ".", optimizer = "adamw" } })
   local ddp = lw.ddp.new(specs, comm, { device = o.device or "cpu", overlap = false,
      param_dtype = m and m.param_dtype or "fp32" })
   model:bind(ddp)
   if what == "checkpoint" then
      checkpoint.load(where, { ddp = ddp, weights_only = true, comm = comm })
   elseif b.plan then
      for _, spec in ipairs(ddp.specs) do
         local data = foreign.tensor(b.f, b.plan[spec.name], spec.shape)
         ddp:with_param(spec.name, function(t) ffi.copy(t.data, data, 4 * t.numel) end)
      end
   else
      load_file(b.f, ddp, where)
   end
   return { path = where, step = m and m.step, model = model, ddp = ddp, cfg = cfg, arch = arch,
            settings = settings, param_dtype = ddp.param_dtype, comm = comm }
end

-- The model in words: "GPT 4 layers x 64, 4 heads, sequence 32, bytes" (or "vocabulary 300
-- (384 rows)"; with experts "8 experts, top-2").
function trained.describe(t)
   local c, s = t.cfg, t.settings
   if (t.arch or "gpt") ~= "gpt" then
      return ("%s, %s"):format(lw.models.describe(t.arch, c), s.kind == "bytes" and "bytes"
         or ("vocabulary %d (%d rows)"):format(s.vocab, c.vocab))
   end
   return ("GPT %d layers x %d, %d heads, sequence %d, %s%s"):format(c.n_layer, c.n_embd,
      c.n_head, c.seq_len, s.kind == "bytes" and "bytes"
      or ("vocabulary %d (%d rows)"):format(s.vocab, c.vocab),
      c.n_expert and (", %d experts, top-%d"):format(c.n_expert, c.topk) or "")
end

-- The data at path as the recipe opens it for a model of these settings: a text file as bytes
-- (its last 5% the validation split), or token shards (validation: val, else the shards
-- llm.c's naming implies, else the last 5%). A path of the other kind than the model was
-- trained on is refused.
function trained.open_data(path, settings, val)
   local shards = tokens_mod.is_shards(path)
   if shards ~= (settings.kind == "tokens") then
      fail("--data %s is %s, but the model was trained on %s", path,
         shards and "token shards" or "a text file (read as bytes)",
         settings.kind == "tokens" and "token shards (a .bin path or pattern)" or "bytes of a text "
         .. "file")
   end
   if val and not shards then
      fail("--val-data is for token shards; a text file's validation split is its last 5%%")
   end
   if shards then
      return tokens_mod.open(path, { vocab = settings.vocab, seq_len = settings.seq, val = val,
         hint = (" (the model's vocabulary is %d)"):format(settings.vocab) })
   end
   return data_mod.load(path, { seq_len = settings.seq })
end

return trained
