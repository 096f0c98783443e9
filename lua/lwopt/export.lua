-- export.lua: a trained dense GPT, LLaMA or nanochat model (a checkpoint step directory, a
-- --ckpt-dir's newest whole checkpoint, or a model.safetensors / --save-params file) written as
-- another program's files: OUT_DIR/model.safetensors (fp32, named and laid out as gpt_names.lua,
-- llama_names.lua or nanochat_names.lua says) and OUT_DIR/config.json (nanochat: meta.json), both
-- or neither: OUT_DIR is replaced whole (publish.lua), its other files carried over. It reads and
-- converts; it trains nothing and needs no communicator. The command, `lwopt export`, is
-- app/cli_export.lua.
local ffi = require("ffi")
local C = require("lwopt.C")
local json = require("lwopt.json")
local files = require("lwopt.files")
local checkpoint = require("lwopt.checkpoint")
local safetensors = require("lwopt.safetensors")
local weights = require("lwopt.weights")
local names = require("lwopt.gpt_names")
local llama_names = require("lwopt.llama_names")
local nanochat_names = require("lwopt.nanochat_names")
local models = require("lwopt.models")
local arch = require("lwopt.arch")
local errors = require("lwopt.errors")
local publish = require("lwopt.publish")

local export = {}

local WHERE = "export"

-- The formats it writes: GPT-2's two, LLaMA's and nanochat's.
export.FORMATS = { names.FORMATS[1], names.FORMATS[2], llama_names.FORMAT, nanochat_names.FORMAT }

local fail = errors.failer(WHERE)

-- A checkpoint manifest read for export, its messages in export's words.
local function manifest_of(dir, opts)
   local ok, m = pcall(checkpoint.read_manifest, dir, opts)
   if not ok then
      local message = tostring(m)
         :gsub("^(.-manifest%.json): json%.decode: json: (.*)$", "%1 is not valid JSON (%2)")
      fail("%s", errors.plain(message))
   end
   return m
end

-- What CKPT names: { file (the model's safetensors), what (for messages), step, extra (the
-- run's settings, or nil), note (why another checkpoint than `latest`'s was taken) }.
function export.source(path)
   local ok, kind = pcall(files.kind, path)
   if not ok then fail("%s", errors.plain(tostring(kind))) end
   if kind == "missing" then fail("%s does not exist", path) end
   if kind == "file" then
      local dir = files.dirname(path)
      local src = { file = path, what = path }
      -- a checkpoint's model.safetensors: its manifest (checked whole) has the settings
      if path:match("model%.safetensors$") and files.kind(dir .. "/manifest.json") == "file" then
         local m = manifest_of(dir)
         src.step, src.extra = m.step, m.extra
      end
      return src
   end
   if kind ~= "dir" then fail("%s is neither a file nor a directory", path) end
   if files.kind(path .. "/manifest.json") == "file" then
      local m = manifest_of(path)
      return { file = path .. "/model.safetensors", what = path, step = m.step, extra = m.extra }
   end
   local ok, found, why = pcall(checkpoint.find, path)
   if not ok then fail("%s", errors.plain(tostring(found))) end
   if found == nil then
      fail("%s is not a checkpoint (no manifest.json) and holds none (%s)", path, why)
   end
   return { file = found.path .. "/model.safetensors", what = found.path, step = found.step,
            extra = found.manifest.extra, note = found.note }
end

-- The run's settings a file records in its metadata (--save-params), or nil.
local function recorded_settings(f)
   local text = safetensors.metadata(f.st, weights.SETTINGS_KEY)
   if text == nil then return nil end
   local ok, t = pcall(json.decode, text)
   return ok and type(t) == "table" and t or nil
end

-- The dense GPT a file holds: its shapes give layers, width, rows, sequence, tie, biases and
-- MLP width; the settings (extra) or the flags (given: n_head, vocab) the heads and the real
-- vocabulary. Refuses a mixture of experts and tensors that are not lw.arch.gpt's.
function export.model_config(f, extra, given, what)
   extra, given = extra or {}, given or {}
   if extra.arch ~= nil and extra.arch ~= "gpt" then
      fail("%s holds a %s model; hf-gpt2 and nanogpt hold GPT-2's architecture: use --format "
         .. "hf-llama", what, tostring(extra.arch))
   end
   local wte = f.shapes["wte.weight"]
   if wte == nil or #wte ~= 2 or f.shapes["wpe.weight"] == nil then
      fail("%s holds no 'wte.weight' and 'wpe.weight': not an lwopt GPT (its first tensors: %s)",
         what, table.concat({ unpack(f.order, 1, math.min(3, #f.order)) }, ", "))
   end
   if (tonumber(extra.n_expert) or 0) > 0 or f.shapes["h.0.moe.router.weight"] then
      fail("%s is a mixture of experts%s: only dense GPTs are exported (GPT-2 and nanoGPT have "
         .. "one MLP per layer)", what, extra.n_expert and (" (%d experts per layer)")
         :format(extra.n_expert) or "")
   end
   local n_layer = 0
   while f.shapes["h." .. n_layer .. ".ln_1.weight"] do n_layer = n_layer + 1 end
   local fc = f.shapes["h.0.mlp.fc.weight"]
   if n_layer == 0 or fc == nil then fail("%s holds no layers 'h.0.*': not an lwopt GPT", what) end
   local cfg = { n_layer = n_layer, n_embd = wte[2], rows = wte[1],
      seq_len = f.shapes["wpe.weight"][1], tied = f.shapes["lm_head.weight"] == nil,
      bias = f.shapes["ln_f.bias"] ~= nil, mlp_hidden = fc[1] }
   if extra.n_layer and extra.n_layer ~= n_layer then
      fail("%s has %d layers, but its settings say %s", what, n_layer, tostring(extra.n_layer))
   end
   cfg.n_head = given.n_head or extra.n_head
   if cfg.n_head == nil then
      fail("%s does not say its number of attention heads (no checkpoint manifest beside it, no "
         .. "lwopt settings in it): give --n-head N", what)
   end
   -- settings without a vocabulary are of a run on bytes (as a resume reads them)
   cfg.vocab = given.vocab or extra.vocab or (extra.n_layer and 256) or nil
   if cfg.vocab == nil then
      fail("%s does not say its vocabulary (it has %d rows, padded): give --vocab N, the "
         .. "tokenizer's", what, cfg.rows)
   end
   if cfg.vocab > cfg.rows then
      fail("the vocabulary (%d%s) is more than the %d rows of %s's token embedding", cfg.vocab,
         given.vocab and ", --vocab" or "", cfg.rows, what)
   end
   if cfg.n_embd % cfg.n_head ~= 0 then
      fail("%s's width %d is not a multiple of %d heads", what, cfg.n_embd, cfg.n_head)
   end
   local specs = arch.gpt{ n_layer = n_layer, n_embd = cfg.n_embd, n_head = cfg.n_head,
      vocab = cfg.rows, seq_len = cfg.seq_len, tied = cfg.tied, bias = cfg.bias,
      mlp_hidden = cfg.mlp_hidden }
   weights.check(f, specs, WHERE .. ": " .. what, ("an lwopt GPT of %d layers x %d")
      :format(n_layer, cfg.n_embd))
   return cfg
end

-- The formats a refusal points a model of another architecture to.
local FORMAT_OF = { llama = "hf-llama", nanochat = "nanochat" }

-- The lw.models config of the kind.arch model a file holds (or of a models file's model whose
-- entry lists kind.format), for --format kind.format: the config
-- its settings record (extra.model), refused by name when the file holds another architecture
-- or records no config, when kind.unfit(config) says why the format cannot hold it, when
-- given.n_head differs or the vocabulary outgrows the embedding, and checked against the file's
-- tensors (kind.label names the model expected). Returns the config and the tokenizer's
-- vocabulary (the settings' or given.vocab).
local function model_config(f, extra, given, what, kind)
   extra, given = extra or {}, given or {}
   local arch = extra.arch or (extra.n_layer and "gpt") or (f.shapes["wpe.weight"] and "gpt")
   -- a models file's model whose entry lists the format is written as the format's model
   local listed = false
   if arch and arch ~= kind.arch then
      local known, entry = pcall(models.get, arch)
      for _, name in ipairs(known and entry.formats or {}) do
         listed = listed or name == kind.format
      end
   end
   if arch ~= kind.arch and not listed then
      fail("%s holds %s; --format %s holds %s's architecture (a run with --arch %s): use "
         .. "--format %s", what, arch and ("a %s model"):format(arch)
         or ("no model whose settings say --arch %s (no checkpoint manifest beside it, no "
         .. "lwopt settings in it)"):format(kind.arch), kind.format, kind.title, kind.arch,
         FORMAT_OF[arch] or "hf-gpt2 or nanogpt")
   end
   if type(extra.model) ~= "table" then
      fail("%s holds a %s model but does not record its config (the settings' model)", what,
         arch)
   end
   local ok, m = pcall(models.config, arch, extra.model, WHERE .. ": " .. what)
   if not ok then fail("%s", errors.plain((tostring(m):gsub("^export: ", "")))) end
   local why = kind.unfit(m)
   if why then fail("%s cannot be written as %s: %s", what, kind.format, why) end
   if given.n_head and given.n_head ~= m.n_head then
      fail("--n-head %d: %s records %d heads", given.n_head, what, m.n_head)
   end
   local vocab = given.vocab or extra.vocab or 256
   if vocab > m.vocab then
      fail("the vocabulary (%d%s) is more than the %d rows of %s's token embedding", vocab,
         given.vocab and ", --vocab" or "", m.vocab, what)
   end
   weights.check(f, weights.names_and_shapes(models.specs(arch, m)), WHERE .. ": " .. what,
      ("%s of %d layers x %d"):format(kind.label, m.n_layer, m.n_embd))
   return m, vocab
end

-- The LLaMA a file holds, for hf-llama: the lw.models config its settings record (extra.model),
-- checked against its tensors and against what LlamaForCausalLM can hold; the tokenizer's
-- vocabulary from the settings or given.vocab, the padded rows from the config. Returns the
-- names.map config of llama_names.lua, seq_len, norm_eps and rope_base added.
function export.llama_config(f, extra, given, what)
   local m, vocab = model_config(f, extra, given, what, { arch = "llama", format = "hf-llama",
      title = "LLaMA", label = "an lwopt LLaMA", unfit = llama_names.unfit })
   return { n_layer = m.n_layer, n_embd = m.n_embd, n_head = m.n_head, n_kv_head = m.n_kv_head,
      mlp_hidden = m.mlp_hidden, vocab = vocab, rows = m.vocab, seq_len = m.seq_len,
      tied = m.tied, norm_eps = m.norm_eps, rope_base = m.rope_base,
      rope_pairing = m.rope_pairing, arch = "llama" }
end

-- The nanochat model a file holds, for --format nanochat: the lw.models config its settings
-- record (extra.model), checked against its tensors and against what nanochat's GPT computes.
-- Returns { model (that config), vocab (the tokenizer's), rows (nanochat's padded rows),
-- n_layer, n_embd, n_head, n_kv_head }.
function export.nanochat_config(f, extra, given, what)
   local m, vocab = model_config(f, extra, given, what, { arch = "nanochat",
      format = "nanochat", title = "nanochat", label = "an lwopt nanochat model",
      unfit = nanochat_names.unfit })
   return { model = m, vocab = vocab, rows = nanochat_names.rows(vocab), lwopt_rows = m.vocab,
      n_layer = m.n_layer, n_embd = m.n_embd, n_head = m.n_head, n_kv_head = m.n_kv_head,
      arch = "nanochat" }
end

-- The config.json of a format for the model cfg (a JSON-ready table); nanochat's meta.json.
function export.config(format, cfg, step)
   if format == "hf-llama" then return llama_names.config(cfg) end
   if format == "nanochat" then return nanochat_names.meta(cfg.model, cfg.vocab, step) end
   if format == "nanogpt" then
      -- nanoGPT's GPTConfig fields: GPT(GPTConfig(**config)) builds the model these tensors fit
      return { block_size = cfg.seq_len, vocab_size = cfg.rows, n_layer = cfg.n_layer,
         n_head = cfg.n_head, n_embd = cfg.n_embd, dropout = 0.0, bias = cfg.bias }
   end
   local gpt2_tokenizer = cfg.vocab == 50257
   return {
      architectures = json.array({ "GPT2LMHeadModel" }), model_type = "gpt2",
      vocab_size = cfg.vocab, n_positions = cfg.seq_len, n_ctx = cfg.seq_len,
      n_embd = cfg.n_embd, n_layer = cfg.n_layer, n_head = cfg.n_head,
      n_inner = cfg.mlp_hidden ~= 4 * cfg.n_embd and cfg.mlp_hidden or json.null,
      -- lwopt's GELU is the tanh form (lw_gelu_forward), which transformers calls gelu_new
      activation_function = "gelu_new", layer_norm_epsilon = 1e-5, initializer_range = 0.02,
      -- lwopt trains without dropout
      resid_pdrop = 0, embd_pdrop = 0, attn_pdrop = 0, summary_first_dropout = 0,
      scale_attn_weights = true, scale_attn_by_inverse_layer_idx = false,
      reorder_and_upcast_attn = false, use_cache = true, tie_word_embeddings = cfg.tied,
      bos_token_id = gpt2_tokenizer and 50256 or json.null,
      eos_token_id = gpt2_tokenizer and 50256 or json.null,
      torch_dtype = "float32",
   }
end

local function zeros(n) return ffi.new("float[?]", math.max(n, 1)) end

-- One entry of names.map as a new fp32 array of its shape, from the open file f.
local function tensor_of(f, e)
   local n = weights.numel(e.shape)
   if e.from == nil then return zeros(n) end
   local src = weights.read(f, e.from)
   -- ours [n_out, n_in] -> theirs [n_in, n_out]
   if e.transpose then return weights.transpose(src, e.shape[2], e.shape[1]) end
   return src -- the first rows of an unpadded vocabulary are the array's start
end

-- The tensors of format for the model in file f (config cfg): { name, shape, data }.
function export.tensors(f, format, cfg)
   if format == "nanochat" then
      local out, whole = {}, {}
      local list = nanochat_names.map(cfg)
      for _, e in ipairs(list) do
         if e.from then whole[e.from] = whole[e.from] or weights.read(f, e.from) end
         local have = e.from and f.shapes[e.from][1]
         out[#out + 1] = { name = e.name, shape = e.shape,
            data = nanochat_names.slice(e.from and whole[e.from], e, have) }
      end
      return out, list
   end
   if format == "hf-llama" then
      local out, whole = {}, {}
      local list = llama_names.map(cfg)
      for _, e in ipairs(list) do
         whole[e.from] = whole[e.from] or weights.read(f, e.from)
         out[#out + 1] = { name = e.name, shape = e.shape,
            data = llama_names.slice(whole[e.from], e) }
      end
      return out, list
   end
   local list, why = names.map(format, cfg)
   if list == nil then fail("--format %s: %s", format, why) end
   local out = {}
   for _, e in ipairs(list) do
      out[#out + 1] = { name = e.name, shape = e.shape, data = tensor_of(f, e) }
   end
   return out, list
end

-- export.run{ ckpt, format (nil: the first of the formats its model's registry entry names:
-- hf-gpt2, hf-llama for a LLaMA, nanochat for nanochat's), out_dir, n_head, vocab }: writes
-- out_dir/model.safetensors and out_dir/config.json (nanochat: out_dir/meta.json), both or
-- neither (publish.dir: out_dir as it was until both are whole and durable, then
-- replaced in one step, its other files carried over). Returns { file, config, tensors (count),
-- values, cfg, src, format (the one written), dropped (the tied LM head left out) }.
function export.run(o)
   local src = export.source(o.ckpt)
   local f = weights.open(src.file, WHERE .. ": " .. src.file)
   local extra = src.extra or recorded_settings(f)
   -- the formats that hold the model its settings name (its registry entry's; a file without
   -- settings: each format's reader judges its tensors), the first when --format is not given
   local arch = (extra or {}).arch or (extra and extra.n_layer and "gpt")
   if arch then
      -- a models file's model: known once --models loads its file, which the settings name
      local entry = models.recorded(arch, (src.step and "checkpoint " or "") .. src.what,
         extra.models_file)
      local formats = entry.formats
      if #formats == 0 then
         local held = {}
         for _, name in ipairs(models.names()) do
            if #models.get(name).formats > 0 then held[#held + 1] = name end
         end
         fail("%s holds a %s model, which no export format holds (they hold the models %s)",
            src.what, entry.title, table.concat(held, ", "))
      end
      local fits = o.format == nil
      for _, name in ipairs(formats) do fits = fits or name == o.format end
      if not fits then
         fail("%s holds a %s model, which --format %s does not hold: use --format %s",
            src.what, entry.title, o.format, table.concat(formats, " or "))
      end
      o.format = o.format or formats[1]
      -- a models file's entry may name a format that is not one (a typo)
      local real = false
      for _, name in ipairs(export.FORMATS) do real = real or name == o.format end
      if not real then
         fail("%s holds a %s model, whose entry lists the format '%s', which is not one of "
            .. "lwopt export's (%s)", src.what, entry.title, tostring(o.format),
            table.concat(export.FORMATS, ", "))
      end
   end
   o.format = o.format or "hf-gpt2"
   local given = { n_head = o.n_head, vocab = o.vocab }
   local cfg
   if o.format == "nanochat" then
      cfg = export.nanochat_config(f, extra, given, src.what)
   elseif o.format == "hf-llama" then
      cfg = export.llama_config(f, extra, given, src.what)
   else
      cfg = export.model_config(f, extra, given, src.what)
   end
   local out_dir = o.out_dir:gsub("(.)/+$", "%1") -- "hf/" names hf/config.json, not hf//
   local out_file = out_dir .. "/model.safetensors"
   -- nanochat's checkpoints carry a meta JSON beside the weights, not a config.json
   local config_name = o.format == "nanochat" and "meta.json" or "config.json"
   local config_file = out_dir .. "/" .. config_name
   local r = { file = out_file, config = config_file, cfg = cfg, src = src, format = o.format,
               dropped = o.format ~= "nanogpt" and cfg.tied }
   publish.dir(out_dir, function(stage)
      if files.real_path(out_file) == files.real_path(src.file)
         or files.same_file(out_file, src.file) then
         fail("%s is the checkpoint's own model.safetensors: writing it would destroy the "
            .. "input; choose another OUT_DIR", out_file)
      end
      local tensors = export.tensors(f, o.format, cfg)
      local config = export.config(o.format, cfg, src.step)
      r.tensors, r.values = #tensors, 0
      for _, t in ipairs(tensors) do r.values = r.values + weights.numel(t.shape) end
      local ok, err = pcall(safetensors.write, stage .. "/model.safetensors", tensors, {
         { "format", "pt" }, -- what transformers' loader asks of a safetensors file
         { "lwopt.format", o.format },
         { "lwopt.source", src.what .. (src.step and (" (step %d)"):format(src.step) or "") },
         { "config", json.encode(config) },
      })
      if not ok then fail("cannot write %s: %s", out_file, errors.plain(tostring(err))) end
      local text = json.encode(config, "  ") .. "\n"
      -- lw_file_write fsyncs, as the safetensors writer does: both durable before the exchange
      if C.lib.lw_file_write(stage .. "/" .. config_name, text, #text, nil) ~= 0 then
         fail("cannot write %s: %s", config_file, errors.plain(C.last_error()))
      end
   end)
   return r
end

return export
