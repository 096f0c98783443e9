-- foreign.lua: a GPT in another program's names (an `lwopt export` in hf-gpt2 or nanogpt names,
-- or OpenAI's GPT-2 as transformers saves it; a LLaMA in hf-llama names, llama_names.lua; a
-- nanochat model in its names, nanochat_names.lua) seen as lwopt's model: which format a file
-- is in,
-- the model its tensors' shapes give (layers, width, vocabulary, sequence, MLP, tie, biases),
-- the settings it records (its metadata's config, else a config.json beside it) and each lwopt
-- parameter read back from it (Conv1D weights transposed, GPT-2's vocabulary padded with zero
-- rows). Used by lwopt.trained (`lwopt sample`, `lwopt eval`) and the recipe's --init-from.
local ffi = require("ffi")
local json = require("lwopt.json")
local files = require("lwopt.files")
local safetensors = require("lwopt.safetensors")
local weights = require("lwopt.weights")
local names = require("lwopt.gpt_names")
local llama_names = require("lwopt.llama_names")
local nanochat_names = require("lwopt.nanochat_names")
local presets = require("lwopt.presets")
local errors = require("lwopt.errors")

local foreign = {}

-- A layer's causal mask, which older GPT-2 files keep beside the weights (a buffer, not a
-- parameter: "attn.bias" [1, 1, n, n] and "attn.masked_bias"; not "attn.c_attn.bias").
local function is_mask(name)
   return name:match("%.attn%.bias$") ~= nil or name:match("%.attn%.masked_bias$") ~= nil
end

-- foreign.view(f): an open weights file (weights.open's) as the formats here name it: f itself,
-- or, for the Hugging Face hub's GPT-2 (GPT2Model's state dict: "h.0.attn.c_attn.weight",
-- "wte.weight", without GPT2LMHeadModel's "transformer."), a view with that prefix added; either
-- without the causal masks. The view's stored maps its names to the file's (weights.read).
function foreign.view(f)
   local hub = f.shapes["h.0.attn.c_attn.weight"] ~= nil and f.shapes["wte.weight"] ~= nil
   local masks = false
   for _, name in ipairs(f.order) do masks = masks or is_mask(name) end
   if not hub and not masks then return f end
   local v = { path = f.path, st = f.st, shapes = {}, dtypes = {}, order = {}, stored = {} }
   for _, name in ipairs(f.order) do
      if not is_mask(name) then
         local ours = (hub and name ~= "lm_head.weight") and "transformer." .. name or name
         v.shapes[ours], v.dtypes[ours], v.stored[ours] = f.shapes[name], f.dtypes[name], name
         v.order[#v.order + 1] = ours
      end
   end
   return v
end

-- The format of an open weights file (weights.open's): "lwopt", "hf-gpt2", "nanogpt",
-- "hf-llama" or "nanochat", as the export's metadata says or, without it, as the names and
-- shapes show.
function foreign.format(f)
   return safetensors.metadata(f.st, "lwopt.format")
      or (f.shapes["model.embed_tokens.weight"] and llama_names.FORMAT)
      or (f.shapes["transformer.h.0.attn.c_q.weight"] and nanochat_names.FORMAT)
      or names.detect(function(name) return f.shapes[name] end)
end

-- A JSON object from text, or nil (a damaged config says nothing rather than failing).
local function object_of(text)
   if text == nil then return nil end
   local ok, t = pcall(json.decode, text)
   return ok and type(t) == "table" and t or nil
end

-- The config a file in another format records: its metadata's, else a config.json beside it
-- (transformers' or nanoGPT's keys; nanochat's: a meta.json), and where it was read; nil when
-- it has none.
function foreign.config(f)
   local config, from = object_of(safetensors.metadata(f.st, "config")), "its metadata's config"
   if config == nil then
      local beside = foreign.format(f) == nanochat_names.FORMAT and "meta.json" or "config.json"
      local path = files.dirname(f.path) .. "/" .. beside
      local h = io.open(path, "rb")
      if h then
         config, from = object_of(h:read("*a")), path
         h:close()
      end
   end
   if config == nil then return nil, nil end
   return config, from
end

-- The settings a file records, in a checkpoint manifest's words ({ n_head, vocab, seq, n_layer,
-- n_embd }), and where they were read ("its metadata", "config.json beside it"); {} and nil
-- when it records none. lwopt's names: --save-params's settings; another format: the config
-- an export writes into the metadata and beside the file (transformers' or nanoGPT's keys).
function foreign.recorded(f, fmt)
   if fmt == "lwopt" then
      local t = object_of(safetensors.metadata(f.st, weights.SETTINGS_KEY))
      return t or {}, t and "its lwopt settings" or nil
   end
   local config, from = foreign.config(f)
   if config == nil then return {}, nil end
   if fmt == nanochat_names.FORMAT then
      local mc = type(config.model_config) == "table" and config.model_config or config
      return { n_head = tonumber(mc.n_head), n_layer = tonumber(mc.n_layer),
         n_embd = tonumber(mc.n_embd), seq = tonumber(mc.sequence_len),
         vocab = tonumber(mc.vocab_size) }, from
   end
   if fmt == llama_names.FORMAT then
      return { n_head = tonumber(config.num_attention_heads),
         n_layer = tonumber(config.num_hidden_layers), n_embd = tonumber(config.hidden_size),
         seq = tonumber(config.max_position_embeddings), vocab = tonumber(config.vocab_size) },
         from
   end
   local hf = fmt == "hf-gpt2"
   local out = { n_head = tonumber(config.n_head), n_layer = tonumber(config.n_layer),
      n_embd = tonumber(config.n_embd),
      seq = tonumber(hf and config.n_positions or config.block_size),
      -- nanoGPT's vocab_size counts the padded rows: the tokenizer's is not recorded
      vocab = hf and tonumber(config.vocab_size) or nil }
   return out, from
end

-- Whether any bias tensor of the file holds a value other than zero.
local function any_bias(f)
   for _, name in ipairs(f.order) do
      if name:match("%.bias$") then
         local x = weights.read(f, name)
         for i = 0, weights.numel(f.shapes[name]) - 1 do
            if x[i] ~= 0 then return true end
         end
      end
   end
   return false
end

-- The lwopt model a file in another format holds, from its tensors' shapes: { n_layer, n_embd,
-- vocab (hf-gpt2: the tokenizer's, its rows; nanogpt: nil), rows (lwopt's padded vocabulary),
-- seq_len, tied, bias, mlp_hidden }. hf-gpt2 always stores biases: the model has them when one
-- is not zero. where names the file in errors.
function foreign.shape(f, fmt, where)
   local wte, wpe = f.shapes["transformer.wte.weight"], f.shapes["transformer.wpe.weight"]
   local fc = f.shapes["transformer.h.0.mlp.c_fc.weight"]
   if not (wte and wpe and fc and #wte == 2 and #wpe == 2 and #fc == 2) then
      errors.fail(where, "holds no %s GPT (no transformer.wte, transformer.wpe and "
         .. "transformer.h.0.mlp.c_fc weights)", fmt)
   end
   local hf = fmt == "hf-gpt2"
   local n_layer = 0
   while f.shapes["transformer.h." .. n_layer .. ".ln_1.weight"] do n_layer = n_layer + 1 end
   local cfg = { n_layer = n_layer, n_embd = wte[2], seq_len = wpe[1],
      mlp_hidden = hf and fc[2] or fc[1], tied = f.shapes["lm_head.weight"] == nil or not hf,
      vocab = hf and wte[1] or nil, rows = hf and presets.vocab_rows(wte[1]) or wte[1] }
   if hf then
      cfg.bias = any_bias(f)
   else
      cfg.bias = f.shapes["transformer.ln_f.bias"] ~= nil
   end
   return cfg
end

-- The entries of names.map for the model cfg (foreign.shape's, with the tokenizer's vocab),
-- checked against the file: every name, shape and dtype. Returns them by lwopt parameter.
function foreign.plan(f, fmt, cfg, where)
   local list, why = names.map(fmt, { n_layer = cfg.n_layer, n_embd = cfg.n_embd,
      vocab = cfg.vocab or cfg.rows, rows = cfg.rows, seq_len = cfg.seq_len, tied = cfg.tied,
      bias = cfg.bias, mlp_hidden = cfg.mlp_hidden })
   if list == nil then errors.fail(where, "%s", why) end
   weights.check(f, list, where, fmt .. "'s names")
   local by_param = {}
   for _, e in ipairs(list) do
      if e.from and not e.alias then by_param[e.from] = e end
   end
   return by_param
end

-- The LLaMA an hf-llama file holds: lw.models' llama config (vocab: lwopt's padded rows,
-- real_vocab: the file's; rope_pairing halves, transformers'), from its tensors' shapes and its
-- config (foreign.config), checked against the file (every name, shape and dtype); and its
-- entries by lwopt parameter (llama_names.by_param). where names the file in errors.
function foreign.llama(f, where)
   local cfg, why = llama_names.model_config(f.shapes, foreign.config(f), presets.vocab_rows)
   if cfg == nil then errors.fail(where, "%s", why) end
   return cfg, foreign.llama_plan(f, cfg, cfg.real_vocab, where)
end

-- The entries of an hf-llama file for the lwopt LLaMA cfg (lw.models' config: vocab its padded
-- rows) and the tokenizer's vocab, checked against the file; by lwopt parameter.
function foreign.llama_plan(f, cfg, vocab, where)
   local list = llama_names.map{ n_layer = cfg.n_layer, n_embd = cfg.n_embd,
      n_head = cfg.n_head, n_kv_head = cfg.n_kv_head, mlp_hidden = cfg.mlp_hidden,
      vocab = vocab, tied = cfg.tied, rope_pairing = cfg.rope_pairing }
   weights.check(f, list, where, "hf-llama's names")
   return llama_names.by_param(list)
end

-- The nanochat model a nanochat file holds: lw.models' nanochat config (vocab: lwopt's padded
-- rows; real_vocab, the tokenizer's; rows, the file's; smear: whether it has the smear gate and
-- backout scalar) from its tensors' shapes and its meta (foreign.config), checked against the
-- file; and its entries by lwopt parameter. where names the file in errors.
function foreign.nanochat(f, where)
   local cfg, why = nanochat_names.model_config(f.shapes, foreign.config(f), presets.vocab_rows)
   if cfg == nil then errors.fail(where, "%s", why) end
   return cfg, foreign.nanochat_plan(f, cfg, where)
end

-- The entries of a nanochat file for cfg (foreign.nanochat's, or an lw.models nanochat config
-- with rows and smear added), checked against the file, by lwopt parameter; the parts lwopt's
-- model lacks (the smear gate, the backout scalar) must be zero there.
function foreign.nanochat_plan(f, cfg, where)
   local list = nanochat_names.map{ n_layer = cfg.n_layer, n_embd = cfg.n_embd,
      n_head = cfg.n_head, n_kv_head = cfg.n_kv_head, rows = cfg.rows, smear = cfg.smear }
   weights.check(f, list, where, "nanochat's names")
   local by_param, zeros = nanochat_names.by_param(list)
   for _, e in ipairs(zeros) do
      local x = weights.read(f, e.name)
      for i = 0, weights.numel(e.shape) - 1 do
         if x[i] ~= 0 then
            errors.fail(where, "'%s' is not zero (%g), and lwopt's nanochat model has no smear "
               .. "gate or backout: these weights need those parts", e.name, x[i])
         end
      end
   end
   return by_param
end

-- An lwopt parameter of shape (its whole tensor's) as an fp32 host array, from its entry e of
-- foreign.plan: Conv1D's [in, out] transposed back to [out, in], an unpadded vocabulary's rows
-- followed by zero rows; or of foreign.llama_plan or nanochat_plan: its pieces put together.
function foreign.tensor(f, e, shape)
   if e.nanochat then return nanochat_names.assemble(f, e, shape) end
   if e.pieces then return llama_names.assemble(f, e, shape) end
   local src = weights.read(f, e.name)
   if e.transpose then return weights.transpose(src, e.shape[1], e.shape[2]) end
   if e.rows and e.rows < shape[1] then
      local out = ffi.new("float[?]", weights.numel(shape)) -- zero-filled: the padding rows
      ffi.copy(out, src, 4 * weights.numel(e.shape))
      return out
   end
   return src
end

return foreign
