-- llama_names.lua: lwopt's LLaMA (lw.models' llama: nn.GPT's names, a fused qkv weight of Q, K
-- and V rows, a fused [gate | up] MLP weight, the vocabulary padded) as Hugging Face's
-- LlamaForCausalLM names and lays it out: q_proj, k_proj, v_proj, gate_proj and up_proj cut out
-- of the fused weights, the real vocabulary, and Q and K rows in the halves pairing that
-- transformers' rotate_half assumes. One list drives both directions: `lwopt export --format
-- hf-llama` (lwopt -> theirs) and --init-from / sample / eval of such a file (theirs -> lwopt).
-- Also the model config.json gives (transformers' keys), and the lwopt config for it.
local ffi = require("ffi")
local weights = require("lwopt.weights")
local json = require("lwopt.json")

local names = {}

names.FORMAT = "hf-llama"
names.ABOUT = "Hugging Face LLaMA (transformers LlamaForCausalLM)"

-- The parts of lw.models' llama that LlamaForCausalLM has, as the config fields that say them:
-- a model with another value cannot be written in its names.
names.PARTS = { norm = "rmsnorm", norm_gain = true, position = "rotary", activation = "swiglu",
   bias = false, qk_norm = false, window = 0, n_expert = 0, embed_norm = false, softcap = 0 }

-- Whether cfg (an lw.models llama config) is a LlamaForCausalLM; nil or why not.
function names.unfit(cfg)
   for _, key in ipairs({ "norm", "norm_gain", "position", "activation", "bias", "qk_norm",
      "window", "n_expert", "embed_norm", "softcap" }) do
      local want, have = names.PARTS[key], cfg[key]
      if have ~= nil and have ~= want then
         return ("its %s is %s, and LlamaForCausalLM's is %s"):format(key, tostring(have),
            tostring(want))
      end
   end
   return nil
end

-- Row n of a head of hd rows in the halves pairing is row perm(n) of the interleaved one: the
-- pair (2i, 2i + 1) becomes (i, i + hd/2), with its angle base^(-2i/hd) unchanged. Applied to
-- Q and K alike, every q.k product keeps its value.
local function interleaved_row(n, hd)
   local half = hd / 2
   if n < half then return 2 * n end
   return 2 * (n - half) + 1
end

-- names.map(cfg): the file's tensors in transformers' order for cfg = { n_layer, n_embd,
-- n_head, n_kv_head, mlp_hidden, vocab (the tokenizer's, real), rows (lwopt's padded), tied,
-- rope_pairing }. Each entry: { name, shape (theirs), from (the lwopt parameter), row0 (theirs
-- is rows row0.. of lwopt's tensor), head_dim (rows permuted within heads of this many:
-- interleaved pairing written as halves) }.
function names.map(cfg)
   local c, h = cfg.n_embd, cfg.mlp_hidden
   local hd = c / cfg.n_head
   local q, kv = cfg.n_head * hd, cfg.n_kv_head * hd
   local turn = cfg.rope_pairing == "interleaved" and hd or nil
   local list = {}
   local function add(name, shape, from, row0, head_dim)
      list[#list + 1] = { name = name, shape = shape, from = from, row0 = row0 or 0,
         head_dim = head_dim }
   end
   add("model.embed_tokens.weight", { cfg.vocab, c }, "wte.weight")
   for i = 0, cfg.n_layer - 1 do
      local theirs, ours = "model.layers." .. i .. ".", "h." .. i .. "."
      add(theirs .. "input_layernorm.weight", { c }, ours .. "ln_1.weight")
      add(theirs .. "self_attn.q_proj.weight", { q, c }, ours .. "attn.qkv.weight", 0, turn)
      add(theirs .. "self_attn.k_proj.weight", { kv, c }, ours .. "attn.qkv.weight", q, turn)
      add(theirs .. "self_attn.v_proj.weight", { kv, c }, ours .. "attn.qkv.weight", q + kv)
      add(theirs .. "self_attn.o_proj.weight", { c, c }, ours .. "attn.proj.weight")
      add(theirs .. "post_attention_layernorm.weight", { c }, ours .. "ln_2.weight")
      add(theirs .. "mlp.gate_proj.weight", { h, c }, ours .. "mlp.fc.weight", 0)
      add(theirs .. "mlp.up_proj.weight", { h, c }, ours .. "mlp.fc.weight", h)
      add(theirs .. "mlp.down_proj.weight", { c, h }, ours .. "mlp.proj.weight")
   end
   add("model.norm.weight", { c }, "ln_f.weight")
   -- a tied head is left out: transformers ties lm_head to embed_tokens (tie_word_embeddings)
   if not cfg.tied then add("lm_head.weight", { cfg.vocab, c }, "lm_head.weight") end
   return list
end

-- The columns of an entry's rows (1 for a vector).
local function cols(e) return e.shape[2] or 1 end

-- Entry e's tensor (theirs) as a new fp32 array, from lwopt's whole tensor src.
function names.slice(src, e)
   local n, w = e.shape[1], cols(e)
   local out = ffi.new("float[?]", math.max(n * w, 1))
   for r = 0, n - 1 do
      local from = r
      if e.head_dim then
         local head = math.floor(r / e.head_dim)
         from = head * e.head_dim + interleaved_row(r % e.head_dim, e.head_dim)
      end
      ffi.copy(out + r * w, src + (e.row0 + from) * w, 4 * w)
   end
   return out
end

-- The reverse of names.slice: entry e's tensor (theirs, data) written into lwopt's whole tensor
-- dst (rows outside the entry's untouched: zero padding rows stay zero).
function names.place(dst, data, e)
   local n, w = e.shape[1], cols(e)
   for r = 0, n - 1 do
      local to = r
      if e.head_dim then
         local head = math.floor(r / e.head_dim)
         to = head * e.head_dim + interleaved_row(r % e.head_dim, e.head_dim)
      end
      ffi.copy(dst + (e.row0 + to) * w, data + r * w, 4 * w)
   end
end

-- The entries of a map grouped by the lwopt parameter they fill: { [from] = { pieces = {...} } }.
function names.by_param(list)
   local out = {}
   for _, e in ipairs(list) do
      out[e.from] = out[e.from] or { pieces = {} }
      table.insert(out[e.from].pieces, e)
   end
   return out
end

-- lwopt's whole tensor of shape from a file's entries (a names.by_param group), read from the
-- open weights file f.
function names.assemble(f, group, shape)
   local out = ffi.new("float[?]", math.max(weights.numel(shape), 1)) -- zeros: padding rows
   for _, e in ipairs(group.pieces) do names.place(out, weights.read(f, e.name), e) end
   return out
end

-- config.json for the model cfg (a JSON-ready table).
function names.config(cfg)
   local array, null = json.array, json.null
   return {
      architectures = array({ "LlamaForCausalLM" }), model_type = "llama",
      vocab_size = cfg.vocab, hidden_size = cfg.n_embd, intermediate_size = cfg.mlp_hidden,
      num_hidden_layers = cfg.n_layer, num_attention_heads = cfg.n_head,
      num_key_value_heads = cfg.n_kv_head, head_dim = cfg.n_embd / cfg.n_head,
      max_position_embeddings = cfg.seq_len, rms_norm_eps = cfg.norm_eps,
      rope_theta = cfg.rope_base, rope_scaling = null, hidden_act = "silu",
      attention_bias = false, mlp_bias = false, attention_dropout = 0,
      tie_word_embeddings = cfg.tied, initializer_range = 0.02, pretraining_tp = 1,
      use_cache = true, bos_token_id = null, eos_token_id = null, torch_dtype = "float32",
   }
end

-- The lwopt llama config (lw.models' fields) that an hf-llama file's tensors (shapes: name ->
-- shape) and config.json (config, or nil) give, or nil and why. The rows are lwopt's padded
-- vocabulary (vocab_rows(vocab)).
function names.model_config(shapes, config, vocab_rows)
   local embed = shapes["model.embed_tokens.weight"]
   local gate = shapes["model.layers.0.mlp.gate_proj.weight"]
   local k = shapes["model.layers.0.self_attn.k_proj.weight"]
   if not (embed and gate and k and #embed == 2 and #gate == 2 and #k == 2) then
      return nil, "holds no hf-llama model (no model.embed_tokens, model.layers.0.mlp.gate_proj "
         .. "and model.layers.0.self_attn.k_proj weights)"
   end
   config = config or {}
   local n_layer = 0
   while shapes["model.layers." .. n_layer .. ".input_layernorm.weight"] do
      n_layer = n_layer + 1
   end
   local c = embed[2]
   local n_head = tonumber(config.num_attention_heads)
   if n_head == nil then
      return nil, "does not say its attention heads (num_attention_heads: no config in its "
         .. "metadata, no config.json beside it)"
   end
   if c % n_head ~= 0 then
      return nil, ("its num_attention_heads %d does not divide its width %d"):format(n_head, c)
   end
   local hd = c / n_head
   if tonumber(config.head_dim) and tonumber(config.head_dim) ~= hd then
      return nil, ("its head_dim %d is not hidden_size / num_attention_heads = %d (lwopt's "
         .. "heads split the width)"):format(config.head_dim, hd)
   end
   if k[1] % hd ~= 0 then
      return nil, ("its k_proj has %d rows, not a whole number of heads of %d"):format(k[1], hd)
   end
   if config.rope_scaling ~= nil and config.rope_scaling ~= json.null then
      return nil, "its rope_scaling is set (lwopt's rotary embedding has no scaling)"
   end
   if config.attention_bias == true or config.mlp_bias == true then
      return nil, "it has biases (attention_bias or mlp_bias), and lwopt's LLaMA has none"
   end
   if config.hidden_act ~= nil and config.hidden_act ~= "silu" then
      return nil, ("its hidden_act is %s, and lwopt's SwiGLU is silu's"):format(
         tostring(config.hidden_act))
   end
   return { n_layer = n_layer, n_embd = c, n_head = n_head, n_kv_head = k[1] / hd,
      mlp_hidden = gate[1], vocab = vocab_rows(embed[1]), real_vocab = embed[1],
      tied = shapes["lm_head.weight"] == nil,
      seq_len = tonumber(config.max_position_embeddings) or 2048,
      norm_eps = tonumber(config.rms_norm_eps) or 1e-6,
      rope_base = tonumber(config.rope_theta) or 10000, rope_pairing = "halves" }
end

return names
