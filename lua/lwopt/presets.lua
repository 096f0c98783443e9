-- presets.lua: the models of the recipe and of the commands that load what it trained: the
-- presets (model and schedule sizes), the defaults of a mixture of experts, the padded
-- vocabulary and the GPT configuration they make. No flags and no training here (the
-- application's recipe_flags.lua and recipe.lua).
local tokens_mod = require("lwopt.tokens")

local presets = {}

-- Model and schedule sizes. vocab is the token vocabulary of token shards (GPT-2's tokenizer
-- for all: the shards llm.c and modded-nanogpt prepare); byte data always has 256. n_kv_head
-- is --arch llama's: the same layers, width and heads with grouped KV heads (LLaMA's MLP, 8/3
-- of the width, and its fewer K and V rows make a block of 89% (gpt2) to 100% (tiny) of GPT-2's
-- block's parameters; LLaMA's untied head adds a vocabulary's rows); a preset without it gives
-- LLaMA a KV head per head.
presets.NAMES = { "tiny", "small", "wide", "gpt2", "gpt2-medium", "moe" }
presets.presets = {
   tiny = { n_layer = 4, n_embd = 64, n_head = 4, seq = 32, batch = 8, steps = 50, lr = 3e-3,
            warmup = 10, eval_every = 25, vocab = tokens_mod.GPT2_VOCAB, n_kv_head = 2 },
   small = { n_layer = 6, n_embd = 256, n_head = 8, seq = 128, batch = 8, steps = 500, lr = 3e-3,
             warmup = 50, eval_every = 100, vocab = tokens_mod.GPT2_VOCAB, n_kv_head = 4 },
   -- small, 4x wider: for measuring sharding where matrices dominate
   wide = { n_layer = 6, n_embd = 1024, n_head = 16, seq = 128, batch = 8, steps = 500, lr = 1e-3,
            warmup = 50, eval_every = 100, vocab = tokens_mod.GPT2_VOCAB },
   -- GPT-2 124M (nanoGPT's and llm.c's): 18865 steps of 524288 tokens are llm.c's 10B-token
   -- FineWeb run (a global batch of 64 sequences of 1024: --batch 8 x --accum 8 / ranks)
   gpt2 = { n_layer = 12, n_embd = 768, n_head = 12, seq = 1024, batch = 8, steps = 18865,
            lr = 6e-4, warmup = 700, eval_every = 250, vocab = tokens_mod.GPT2_VOCAB,
            n_kv_head = 4 },
   -- GPT-2 350M (GPT-2 medium): 24 layers x 1024, 16 heads, on gpt2's schedule
   ["gpt2-medium"] = { n_layer = 24, n_embd = 1024, n_head = 16, seq = 1024, batch = 8,
                       steps = 18865, lr = 3e-4, warmup = 700, eval_every = 250,
                       vocab = tokens_mod.GPT2_VOCAB },
   -- a small mixture of experts: every MLP replaced by 8 experts (4c hidden each), top-2
   moe = { n_layer = 4, n_embd = 128, n_head = 4, seq = 128, batch = 8, steps = 300, lr = 3e-3,
           warmup = 30, eval_every = 100, vocab = tokens_mod.GPT2_VOCAB, n_expert = 8 },
}

-- AdamW's peak learning rate is the preset's lr: Muon's step is scaled to match AdamW's update
-- size (the library's default scale), so one number suits both; --adamw-lr sets it apart.
for _, p in pairs(presets.presets) do p.adamw_lr = p.lr end

-- What a preset must give: the model's shape and the schedule's size (vocab, adamw_lr and the
-- experts have defaults).
presets.KEYS = { "n_layer", "n_embd", "n_head", "seq", "batch", "steps", "lr", "warmup",
   "eval_every" }
local OPTIONAL = { vocab = true, adamw_lr = true, n_expert = true, topk = true, aux_coef = true,
   base = true, n_kv_head = true }

-- The library's presets with a recipe's own (own: { name = { n_layer = 2, ... } }, each
-- complete or naming a library preset it changes, base = "small"), checked: a name already
-- taken, an unknown base or key, a missing or non-positive value are errors naming the preset.
-- Returns the merged table and the names, the library's first.
function presets.with(own)
   local all, names = {}, {}
   for _, name in ipairs(presets.NAMES) do
      all[name], names[#names + 1] = presets.presets[name], name
   end
   local mine = {}
   for name in pairs(own or {}) do mine[#mine + 1] = name end
   table.sort(mine)
   for _, name in ipairs(mine) do
      local p = own[name]
      local function bad(fmt, ...)
         error(("recipe preset '%s': " .. fmt):format(tostring(name), ...), 0)
      end
      if type(name) ~= "string" or not name:match("^[%w][%w%-_.]*$") then
         bad("a preset's name is a word (letters, digits, - _ .)")
      end
      if all[name] then
         bad("the name of a library preset (%s)", table.concat(presets.NAMES, ", "))
      end
      if type(p) ~= "table" then bad("must be a table, got %s", type(p)) end
      local full = {}
      if p.base ~= nil then
         if not presets.presets[p.base] then
            bad("base '%s' is not a library preset (%s)", tostring(p.base),
               table.concat(presets.NAMES, ", "))
         end
         for k, x in pairs(presets.presets[p.base]) do full[k] = x end
         if p.lr ~= nil and p.adamw_lr == nil then full.adamw_lr = nil end
      end
      for k, x in pairs(p) do
         local known = OPTIONAL[k]
         for _, key in ipairs(presets.KEYS) do known = known or key == k end
         if not known then bad("unknown key '%s'", tostring(k)) end
         if k ~= "base" then full[k] = x end
      end
      for _, k in ipairs(presets.KEYS) do
         local x = full[k]
         local zero = k == "warmup" or k == "eval_every"
         if type(x) ~= "number" or not (x > 0 or (x == 0 and zero)) then
            bad("%s must be a number > 0%s, got %s", k, zero and " (or 0)" or "", tostring(x))
         end
      end
      if full.n_embd % full.n_head ~= 0 then
         bad("n_head %d does not divide n_embd %d", full.n_head, full.n_embd)
      end
      full.vocab = full.vocab or tokens_mod.GPT2_VOCAB
      full.adamw_lr = full.adamw_lr or full.lr
      all[name], names[#names + 1] = full, name
   end
   return all, names
end

-- What a mixture of experts takes when its flags are not given (the preset's, else these).
presets.MOE_DEFAULTS = { topk = 2, aux_coef = 0.01 }

-- The model's vocabulary (its embedding's and LM head's rows) is the token vocabulary padded up
-- to a multiple of this (GPT-2's 50257: 50304, as nanoGPT's), for matrix shapes that suit the
-- GPU. The padded ids never occur as targets, so they only learn a probability near zero; the
-- loss is the same as without them.
presets.VOCAB_MULTIPLE = 128

-- The model's vocabulary for a token vocabulary: padded up to a multiple of VOCAB_MULTIPLE.
function presets.vocab_rows(vocab)
   return math.ceil(vocab / presets.VOCAB_MULTIPLE) * presets.VOCAB_MULTIPLE
end

-- The GPT's configuration (lw.nn.GPT, lw.arch.gpt) for a preset (a name, or a table with its
-- n_layer, n_embd, n_head and seq), a token vocabulary (token data: the preset's or --vocab;
-- bytes: 256), a sequence length (default the preset's) and the
-- experts (moe: { n_expert, topk, aux_coef, shared_expert }; default the preset's, none for a
-- dense preset; n_expert 0: dense) and the dense MLP's hidden size (default 4 n_embd).
function presets.gpt_config(preset, vocab, seq, moe, mlp_hidden)
   local p = type(preset) == "table" and preset or presets.presets[preset]
   local cfg = { n_layer = p.n_layer, n_embd = p.n_embd, n_head = p.n_head,
                 vocab = presets.vocab_rows(vocab), seq_len = seq or p.seq, tied = true,
                 mlp_hidden = mlp_hidden }
   moe = moe or (p.n_expert and { n_expert = p.n_expert })
   if moe and (moe.n_expert or 0) > 0 then
      cfg.n_expert = moe.n_expert
      cfg.topk = moe.topk or p.topk or presets.MOE_DEFAULTS.topk
      cfg.aux_coef = moe.aux_coef or p.aux_coef or presets.MOE_DEFAULTS.aux_coef
      cfg.shared_expert = moe.shared_expert or false
   end
   return cfg
end

return presets
