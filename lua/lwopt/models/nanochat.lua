-- models/nanochat.lua: the registry's entry for nanochat's GPT (Andrej Karpathy's nanochat,
-- nanochat/gpt.py): token embedding without positions, parameter-free RMSNorm before the
-- attention and the MLP and at the end, rotary embeddings by halves turning nanochat's way (the
-- opposite of Hugging Face's) with base 100000, QK norm after the rotation, grouped-query
-- attention, value embeddings mixed into V through a per-head gate on every other layer (the last
-- included), per-layer residual scalars mixing the embedding back in, a ReLU^2 MLP, no biases,
-- an untied head. It is nn.GPT built with those parts (docs/parts.md); what nanochat has beyond
-- them is listed there.
local models = require("lwopt.models")

-- GPT's fields with nanochat's defaults. The norms' eps is torch's default for F.rms_norm in
-- fp32, the dtype's machine epsilon. window is the short window of the pattern's "S" layers (a
-- quarter of the sequence, rounded up to 128, as nanochat's); its "L" layers see the whole
-- sequence.
local DEFAULTS = { norm = "rmsnorm", norm_gain = false, norm_eps = 2 ^ -23, position = "rotary",
   rope_base = 100000, rope_pairing = "halves", rope_reverse = true, activation = "relu2",
   qk_norm = true, tied = false, bias = false, vocab = 32768, seq_len = 2048,
   value_embeds = true, ve_gate_channels = 12, ve_gate_scale = 3, resid_scalars = true,
   softcap = 15, window_pattern = "SSSL", embed_norm = true }
DEFAULTS.window = function(c) return 128 * math.ceil(c.seq_len / 4 / 128) end

-- nanochat's init_weights, by parameter (c: the model's config): how its values are drawn.
-- { normal = std }, { uniform = { lo, hi } }, { values = list } or { zeros = true }.
local function init(spec, c)
   local name = spec.name
   local s = math.sqrt(3) / math.sqrt(c.n_embd) -- a uniform of std 1 / sqrt(n_embd)
   local L = c.n_layer
   local function ramp(first, drop)
      local v = {}
      for i = 0, L - 1 do v[i + 1] = first - drop * i / math.max(L - 1, 1) end
      return { values = v }
   end
   if name == "wte.weight" then return { normal = 0.8 } end
   if name == "lm_head.weight" then return { normal = 0.001 } end
   if name == "resid_lambdas" then return ramp(1.15, 0.10) end
   if name == "x0_lambdas" then return ramp(0.20, 0.15) end
   if name:match("proj%.weight$") then return { zeros = true } end
   if name:match("mlp%.fc%.weight$") then return { uniform = { -0.4 * s, 0.4 * s } } end
   if name:match("ve_gate%.weight$") then return { uniform = { 0, 0.02 } } end
   if name:match("attn%.qkv%.weight$") or name:match("attn%.ve%.weight$") then
      return { uniform = { -s, s } }
   end
   return nil -- anything else: the recipe's default
end

return models.derive("gpt", { name = "nanochat", title = "nanochat", formats = { "nanochat" },
   defaults = DEFAULTS, init = init })
