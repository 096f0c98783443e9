-- nanochat_names.lua: lwopt's nanochat model (lw.models' nanochat: nn.GPT's names, a fused qkv
-- weight of Q, K and V rows, value embeddings under their layer, the vocabulary padded to a
-- multiple of 128) in nanochat's own state-dict names (nanochat/gpt.py's GPT): c_q, c_k and c_v
-- cut out of the fused weight, value_embeds.<i> beside the trunk, every embedding and the head
-- padded as nanochat pads them (to a multiple of 64), and its smear gate and backout scalar,
-- which lwopt's model lacks, as zeros (parts switched off). One list drives both directions:
-- `lwopt export --format nanochat` and --init-from / sample / eval of such a file. Also the
-- meta JSON nanochat's checkpoints carry (its model_config) and the lwopt config it gives.
local ffi = require("ffi")
local weights = require("lwopt.weights")

local names = {}

names.FORMAT = "nanochat"
names.ABOUT = "nanochat (nanochat/gpt.py's GPT state dict)"

-- nanochat pads its vocabulary to a multiple of this (GPT's pad_vocab_size_to).
names.PAD = 64

-- The smear gate reads the first SMEAR_CHANNELS channels of the normed embedding.
local SMEAR_CHANNELS = 24

-- The parts nanochat's GPT hard-codes, as lw.models' fields: a model with another value cannot
-- be written in its names. ABSENT: a field nn.GPT may not have, read as the part being off.
names.PARTS = {
   { "norm", "rmsnorm" }, { "norm_gain", false }, { "norm_eps", 2 ^ -23 },
   { "position", "rotary" }, { "rope_base", 100000 }, { "rope_pairing", "halves" },
   { "rope_reverse", true }, { "activation", "relu2" }, { "qk_norm", true }, { "tied", false },
   { "bias", false }, { "value_embeds", true }, { "ve_gate_channels", 12 },
   { "ve_gate_scale", 3 }, { "resid_scalars", true }, { "n_expert", 0 }, { "softcap", 15 },
   { "embed_norm", true },
}
local ABSENT = { softcap = 0, embed_norm = false, rope_reverse = false, value_embeds = false,
   resid_scalars = false, n_expert = 0 }

-- nanochat's rows for a vocabulary of vocab tokens.
function names.rows(vocab) return math.ceil(vocab / names.PAD) * names.PAD end

-- nanochat's short window for a sequence of seq_len: a quarter, rounded up to 128.
function names.short_window(seq_len) return 128 * math.ceil(seq_len / 4 / 128) end

-- Layer i has value embeddings: every other layer, the last one included (nanochat's has_ve).
local function has_ve(i, n_layer) return i % 2 == (n_layer - 1) % 2 end

-- The window pattern nanochat's config gets for cfg: its own, or "L" (every layer full).
function names.pattern(cfg)
   local p = cfg.window_pattern
   if p == nil or p == "" then return "L" end
   return p
end

-- Whether cfg (an lw.models config) is a model nanochat's GPT computes; nil or why not.
function names.unfit(cfg)
   for _, part in ipairs(names.PARTS) do
      local key, want = part[1], part[2]
      local have = cfg[key]
      if have == nil then have = ABSENT[key] end
      if have ~= want then
         return ("its %s is %s, and nanochat's is %s"):format(key, tostring(have), tostring(want))
      end
   end
   if cfg.mlp_hidden ~= 4 * cfg.n_embd then
      return ("its MLP has %d hidden channels, and nanochat's 4 x n_embd = %d"):format(
         cfg.mlp_hidden, 4 * cfg.n_embd)
   end
   if cfg.n_embd < SMEAR_CHANNELS then
      return ("its width %d is below the %d channels nanochat's smear gate reads"):format(
         cfg.n_embd, SMEAR_CHANNELS)
   end
   local pattern = names.pattern(cfg)
   if pattern:find("S") then
      local want = names.short_window(cfg.seq_len)
      if cfg.window ~= want then
         return ("its short window is %d, and nanochat's for a sequence of %d is %d (a quarter, "
            .. "rounded up to 128)"):format(cfg.window, cfg.seq_len, want)
      end
   elseif cfg.window_pattern == nil and (cfg.window or 0) ~= 0 then
      return ("its window %d holds on every layer, and nanochat's last layer sees the whole "
         .. "sequence"):format(cfg.window)
   end
   return nil
end

-- names.map(cfg): the file's tensors for cfg = { n_layer, n_embd, n_head, n_kv_head, rows
-- (nanochat's padded vocabulary), smear (the smear gate and backout scalar are written: true
-- unless reading a file without them) }. Each entry: { name, shape (theirs), from (the lwopt
-- parameter; nil: zeros, a part lwopt's model lacks), row0 (theirs is rows row0.. of lwopt's
-- tensor) }.
function names.map(cfg)
   local c, L = cfg.n_embd, cfg.n_layer
   local hd = c / cfg.n_head
   local q, kv = cfg.n_head * hd, cfg.n_kv_head * hd
   local list = {}
   local function add(name, shape, from, row0)
      list[#list + 1] = { name = name, shape = shape, from = from, row0 = row0 or 0 }
   end
   add("transformer.wte.weight", { cfg.rows, c }, "wte.weight")
   for i = 0, L - 1 do
      local theirs, ours = "transformer.h." .. i .. ".attn.", "h." .. i .. "."
      add(theirs .. "c_q.weight", { q, c }, ours .. "attn.qkv.weight", 0)
      add(theirs .. "c_k.weight", { kv, c }, ours .. "attn.qkv.weight", q)
      add(theirs .. "c_v.weight", { kv, c }, ours .. "attn.qkv.weight", q + kv)
      add(theirs .. "c_proj.weight", { c, c }, ours .. "attn.proj.weight")
      if has_ve(i, L) then
         add(theirs .. "ve_gate.weight", { cfg.n_kv_head, 12 }, ours .. "attn.ve_gate.weight")
      end
      add("transformer.h." .. i .. ".mlp.c_fc.weight", { 4 * c, c }, ours .. "mlp.fc.weight")
      add("transformer.h." .. i .. ".mlp.c_proj.weight", { c, 4 * c }, ours .. "mlp.proj.weight")
   end
   add("lm_head.weight", { cfg.rows, c }, "lm_head.weight")
   add("resid_lambdas", { L }, "resid_lambdas")
   add("x0_lambdas", { L }, "x0_lambdas")
   if cfg.smear ~= false then
      -- gate 0 x sigmoid(.): no smear; 0 x the mid-layer residual: no backout
      add("smear_gate.weight", { 1, SMEAR_CHANNELS }, nil)
      add("smear_lambda", { 1 }, nil)
      add("backout_lambda", { 1 }, nil)
   end
   for i = 0, L - 1 do
      if has_ve(i, L) then
         add("value_embeds." .. i .. ".weight", { cfg.rows, kv }, "h." .. i .. ".attn.ve.weight")
      end
   end
   return list
end

local function cols(shape) return shape[2] or 1 end

-- Entry e's tensor (theirs) as a new fp32 array from lwopt's whole tensor src of have rows
-- (nil: zeros); rows past lwopt's are zero.
function names.slice(src, e, have)
   local n, w = e.shape[1], cols(e.shape)
   local out = ffi.new("float[?]", math.max(n * w, 1))
   if src ~= nil then
      local copy = math.min(n, (have or n) - e.row0)
      ffi.copy(out, src + e.row0 * w, 4 * w * copy)
   end
   return out
end

-- The reverse: entry e's tensor (theirs, data) into lwopt's whole tensor dst of have rows
-- (rows outside the entry's untouched: lwopt's padding rows stay zero).
function names.place(dst, data, e, have)
   local w = cols(e.shape)
   local n = math.min(e.shape[1], have - e.row0)
   ffi.copy(dst + e.row0 * w, data, 4 * w * n)
end

-- The entries of a map grouped by the lwopt parameter they fill: { [from] = { pieces } };
-- the zero entries under zeros.
function names.by_param(list)
   local out, zeros = {}, {}
   for _, e in ipairs(list) do
      if e.from then
         out[e.from] = out[e.from] or { pieces = {}, nanochat = true }
         table.insert(out[e.from].pieces, e)
      else
         zeros[#zeros + 1] = e
      end
   end
   return out, zeros
end

-- lwopt's whole tensor of shape from a file's entries (a names.by_param group), read from the
-- open weights file f.
function names.assemble(f, group, shape)
   local out = ffi.new("float[?]", math.max(weights.numel(shape), 1)) -- zeros: padding rows
   for _, e in ipairs(group.pieces) do names.place(out, weights.read(f, e.name), e, shape[1]) end
   return out
end

-- nanochat's meta JSON for the model cfg (lw.models' config) of a tokenizer of vocab tokens:
-- its model_config (GPTConfig's fields) and the step.
function names.meta(cfg, vocab, step)
   return { step = step or 0, model_config = { sequence_len = cfg.seq_len, vocab_size = vocab,
      n_layer = cfg.n_layer, n_head = cfg.n_head, n_kv_head = cfg.n_kv_head,
      n_embd = cfg.n_embd, window_pattern = names.pattern(cfg) } }
end

-- The lw.models nanochat config that a file's tensors (shapes: name -> shape) and meta (its
-- model_config, or the meta object holding it; nil: none) give, or nil and why. vocab is
-- lwopt's padded rows (vocab_rows(vocab_size)); real_vocab the tokenizer's.
function names.model_config(shapes, meta, vocab_rows)
   local wte = shapes["transformer.wte.weight"]
   local k = shapes["transformer.h.0.attn.c_k.weight"]
   if not (wte and k and #wte == 2 and #k == 2) then
      return nil, "holds no nanochat model (no transformer.wte and transformer.h.0.attn.c_k "
         .. "weights)"
   end
   local mc = type(meta) == "table" and (meta.model_config or meta) or nil
   if type(mc) ~= "table" or tonumber(mc.n_head) == nil or tonumber(mc.vocab_size) == nil then
      return nil, "does not say its model_config (n_head, vocab_size: no config in its "
         .. "metadata, no meta.json beside it)"
   end
   local n_layer = 0
   while shapes["transformer.h." .. n_layer .. ".attn.c_q.weight"] do n_layer = n_layer + 1 end
   local c, n_head, vocab = wte[2], tonumber(mc.n_head), tonumber(mc.vocab_size)
   local function differs(key, have)
      local said = tonumber(mc[key])
      if said ~= nil and said ~= have then
         return ("its model_config's %s is %d, and its tensors have %d"):format(key, said, have)
      end
   end
   local why = differs("n_layer", n_layer) or differs("n_embd", c)
   if why then return nil, why end
   if c % n_head ~= 0 then
      return nil, ("its n_head %d does not divide its width %d"):format(n_head, c)
   end
   local hd = c / n_head
   if k[1] % hd ~= 0 then
      return nil, ("its c_k has %d rows, not a whole number of heads of %d"):format(k[1], hd)
   end
   why = differs("n_kv_head", k[1] / hd)
   if why then return nil, why end
   if names.rows(vocab) ~= wte[1] then
      return nil, ("its vocab_size %d pads to %d rows (a multiple of %d), and its "
         .. "transformer.wte has %d"):format(vocab, names.rows(vocab), names.PAD, wte[1])
   end
   local pattern = mc.window_pattern or "L" -- nanochat's reading of a meta without one
   if type(pattern) ~= "string" or not pattern:upper():match("^[SL]+$") then
      return nil, ("its window_pattern %s is not a string of S and L"):format(tostring(pattern))
   end
   return { n_layer = n_layer, n_embd = c, n_head = n_head, n_kv_head = k[1] / hd,
      vocab = vocab_rows(vocab), real_vocab = vocab, rows = wte[1],
      seq_len = tonumber(mc.sequence_len) or 2048, window_pattern = pattern:upper(),
      smear = shapes["smear_lambda"] ~= nil }
end

return names
