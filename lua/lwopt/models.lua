-- models.lua: the model registry. Each model is an entry of lwopt/models/<name>.lua: its name,
-- its title (how a run's reports name it), the export formats that hold it, its config fields (lwopt/fields.lua: the shape and how
-- it runs, with defaults and checks), check (the rules across fields), build (an lw.nn module
-- with nn.GPT's loss API: forward(tokens, targets, b, t), backward(loss_scale), parameters(),
-- next_probs(row)), describe (the model in words) and optionally init (spec, cfg: its own initial
-- values by parameter). Whatever needs a model asks here: its parameter specs come from its
-- modules' declarations (no second description to keep equal), for any size and TP rank, without
-- allocating anything. A new architecture is its entry file and its name in NAMES, or, from a
-- recipe, models.register(models.derive(...)).
local errors = require("lwopt.errors")
local fields = require("lwopt.fields")

local models = {}

-- The registered models, in the order `lwopt` lists them.
local NAMES = { "gpt", "llama", "nanochat" }

local entries = {}

-- What a declaration adds to a model's fields: the specs' dtype, and tensor parallelism's
-- degree and this rank (the shards it declares).
local DECLARE_FIELDS = {
   { "dtype", "dtype", "f32" }, { "tp", "size", 1 }, { "tp_rank", "count", 0 },
}

-- The names of the registered models.
function models.names()
   local out = {}
   for i, name in ipairs(NAMES) do out[i] = name end
   return out
end

-- The entry of model `name`; an unknown name is an error listing the known ones.
function models.get(name, where)
   local known = false
   for _, n in ipairs(NAMES) do known = known or n == name end
   if not known then
      errors.fail(where or "lw.models", "unknown model '%s' (%s; a model a recipe registers is "
         .. "known where it registers it)", tostring(name), table.concat(NAMES, ", "))
   end
   entries[name] = entries[name] or require("lwopt.models." .. name)
   return entries[name]
end

-- The model in words, from its entry's title: "LLaMA 4 layers x 64, 4 heads (2 KV), sequence
-- 32", experts added when it has them.
local function describe_by_title(title)
   return function(c)
      return ("%s %d layers x %d, %d heads (%d KV), sequence %d%s"):format(title, c.n_layer,
         c.n_embd, c.n_head, c.n_kv_head, c.seq_len, c.n_expert > 0 and
         (", %d experts, top-%d"):format(c.n_expert, c.topk) or "")
   end
end

-- A new entry made from registered model `base`'s: o = { name, title (default name), defaults
-- (field -> its new default: a value, or a function of the fields before it, as
-- lwopt/fields.lua's), init (default base's), describe (default by title), formats (lwopt
-- export's formats that hold it; default none: base's formats do not hold base's variants) }. The
-- architecture's parts are its fields' defaults (docs/parts.md), so a model made of existing
-- parts is its name and its defaults. A default for a field base lacks is an error naming it.
function models.derive(base, o)
   local who = "lw.models.derive"
   local b = models.get(base, who)
   if type(o) ~= "table" or type(o.name) ~= "string" then
      errors.misuse(who, "expects { name = ..., defaults = { ... } }")
   end
   local defaults, seen, list = o.defaults or {}, {}, {}
   for i, f in ipairs(b.fields) do
      local copy = { f[1], f[2], f[3], f[4] }
      if defaults[f[1]] ~= nil then copy[3], seen[f[1]] = defaults[f[1]], true end
      list[i] = copy
   end
   for key in pairs(defaults) do
      if not seen[key] then
         errors.misuse(who, "'%s' has no field '%s' (the model's fields: lw.models.get('%s').fields)",
            base, tostring(key), base)
      end
   end
   local title = o.title or o.name
   return { name = o.name, title = title, fields = list, check = b.check, build = b.build,
      init = o.init or b.init, describe = o.describe or describe_by_title(title),
      formats = o.formats or {} }
end

-- Adds entry (as lwopt/models/<name>.lua's, or models.derive's) to the registry under its name,
-- for this process: a recipe's own architecture, which its --arch then names. A name already
-- registered, or an entry without its functions, is an error.
function models.register(entry)
   local who = "lw.models.register"
   if type(entry) ~= "table" or type(entry.name) ~= "string"
      or not entry.name:match("^%a[%w_-]*$") then
      errors.misuse(who, "expects an entry whose name is a word (lw.models.derive makes one)")
   end
   for _, n in ipairs(NAMES) do
      if n == entry.name then errors.misuse(who, "a model '%s' is registered already", n) end
   end
   for _, key in ipairs({ "check", "build", "describe" }) do
      if type(entry[key]) ~= "function" then
         errors.misuse(who, "entry '%s' has no %s function", entry.name, key)
      end
   end
   if type(entry.fields) ~= "table" then
      errors.misuse(who, "entry '%s' has no fields list", entry.name)
   end
   entry.title, entry.formats = entry.title or entry.name, entry.formats or {}
   NAMES[#NAMES + 1] = entry.name
   entries[entry.name] = entry
end

-- cfg checked for model `name` (errors named by `who`, default "lw.models.<name>"), its
-- defaults filled in; more: further field lists the caller accepts (checked after).
function models.config(name, cfg, who, ...)
   local m = models.get(name)
   who = who or ("lw.models." .. name)
   local c, err = fields.check(who, cfg, m.fields, ...)
   err = err or m.check(c, who)
   if err then errors.raise(err) end
   return c
end

-- The model `name` of config cfg, built over run's groups (run.tp, run.ep: lw.tp.groups's and
-- lw.ep.groups's tables; nil: none).
function models.build(name, cfg, run)
   local m = models.get(name)
   return m.build(models.config(name, cfg), run or {})
end

-- The parameter specs of model `name` (cfg: its fields, and dtype, tp, tp_rank as
-- DECLARE_FIELDS says), in forward order, from its modules' declarations: TP rank tp_rank's
-- shards at tp above 1. who names the errors (default "lw.models.<name>").
function models.specs(name, cfg, who)
   who = who or ("lw.models." .. name)
   local c = models.config(name, cfg, who, DECLARE_FIELDS)
   if c.tp_rank >= c.tp then
      errors.fail(who, "tp_rank (%d) must be below tp (%d)", c.tp_rank, c.tp)
   end
   local shape = {}
   for _, key in ipairs(fields.keys(models.get(name).fields)) do shape[key] = c[key] end
   local run = c.tp > 1 and { tp = { size = c.tp, rank = c.tp_rank } } or {}
   local ok, model = pcall(models.get(name).build, shape, run)
   if not ok then
      -- the builder's checks name it ("nn.GPT: ..."): said as the declaration's caller's
      errors.fail(who, "%s", (tostring(model):gsub("^[%w_.]+: ", "")))
   end
   local specs = model:parameters()
   for _, s in ipairs(specs) do s.dtype = c.dtype end
   return specs
end

-- The model in words ("GPT 4 layers x 64, 4 heads, sequence 32").
function models.describe(name, cfg)
   return models.get(name).describe(models.config(name, cfg))
end

return models
