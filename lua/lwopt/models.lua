-- models.lua: the model registry. Each model is an entry of lwopt/models/<name>.lua: its name,
-- its title (how a run's reports name it), the export formats that hold it, its config fields (lwopt/fields.lua: the shape and how
-- it runs, with defaults and checks), check (the rules across fields), build (an lw.nn module
-- with nn.GPT's loss API: forward(tokens, targets, b, t), backward(loss_scale), parameters(),
-- next_probs(row)), describe (the model in words) and optionally init (spec, cfg: its own initial
-- values by parameter). Whatever needs a model asks here: its parameter specs come from its
-- modules' declarations (no second description to keep equal), for any size and TP rank, without
-- allocating anything. A new architecture is its entry file and its name in NAMES, or, outside
-- the library, a models file (models.load) that returns models.derive(...)'s entries.
local errors = require("lwopt.errors")
local fields = require("lwopt.fields")

local models = {}

-- The registered models, in the order `lwopt` lists them.
local NAMES = { "gpt", "llama", "nanochat" }

-- The library's own models: a models file cannot take their names.
local LIBRARY, LIBRARY_NAMES = {}, table.concat(NAMES, ", ")
for _, name in ipairs(NAMES) do LIBRARY[name] = true end

local entries = {}

-- The models files loaded in this process by their real path (the names each registered), and
-- the one loading now: its entries are registered by models.load, not by the file itself.
local loaded, loading = {}, nil

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
      errors.fail(where or "lw.models", "unknown model '%s' (%s; other models are registered by a "
         .. "models file: --models FILE)", tostring(name), table.concat(NAMES, ", "))
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

-- Why entry cannot be registered, or nil: a name that is not a word or is taken (the
-- library's, or registered already, by the file that did), functions or fields missing.
local function refusal(entry)
   if type(entry) ~= "table" or type(entry.name) ~= "string"
      or not entry.name:match("^%a[%w_-]*$") then
      return "expects an entry whose name is a word (lw.models.derive makes one)"
   end
   if LIBRARY[entry.name] then
      return ("'%s' is the name of one of the library's models (%s): give the model another "
         .. "name"):format(entry.name, LIBRARY_NAMES)
   end
   for _, n in ipairs(NAMES) do
      if n == entry.name then
         return ("a model '%s' is registered already%s"):format(n, entries[n] and entries[n].file
            and (" (by " .. entries[n].file .. ")") or "")
      end
   end
   for _, key in ipairs({ "check", "build", "describe" }) do
      if type(entry[key]) ~= "function" then
         return ("entry '%s' has no %s function"):format(entry.name, key)
      end
   end
   if type(entry.fields) ~= "table" then
      return ("entry '%s' has no fields list"):format(entry.name)
   end
end

-- Adds entry (as lwopt/models/<name>.lua's, or models.derive's) to the registry under its name,
-- for this process: a recipe's own architecture, which its --arch then names. A name already
-- registered, or an entry without its functions, is an error (who: the place it names, default
-- "lw.models.register"). A models file returns its entries instead of calling this
-- (models.load registers them and records the file).
function models.register(entry, who)
   who = who or "lw.models.register"
   if loading and who == "lw.models.register" then
      loading.calls_register = true
      errors.misuse(who, "called by a models file")
   end
   local bad = refusal(entry)
   if bad then errors.misuse(who, "%s", bad) end
   entry.title, entry.formats = entry.title or entry.name, entry.formats or {}
   NAMES[#NAMES + 1] = entry.name
   entries[entry.name] = entry
end

-- The entries a models file's chunk returned, as a list: one entry, or a list of them.
local function entries_of(result, path)
   if type(result) ~= "table" then
      errors.fail("lw.models.load", "models file %s registers nothing: it must return an entry "
         .. "(lw.models.derive(...)) or a list of entries, and returned %s", path, type(result))
   end
   if result.name ~= nil then return { result } end
   if #result == 0 then
      errors.fail("lw.models.load", "models file %s registers nothing: it returned an empty "
         .. "table (an entry has a name; a list holds entries)", path)
   end
   return result
end

-- models.load(path): runs the models file at path, a Lua file that returns one entry (as
-- models.derive makes) or a list of them, and registers each, recording the file's absolute
-- path in entry.file (a checkpoint keeps it as a hint of where its model came from). A file
-- loaded already is not run again. Errors name the file: missing, a syntax error (with its
-- line), an error while it runs, no entries, a name the library's or another file's. Returns
-- the names it registered.
function models.load(path)
   local who = "lw.models.load"
   local files = require("lwopt.files")
   if type(path) ~= "string" or path == "" then
      errors.misuse(who, "expects the path of a models file")
   end
   local kind = files.kind(path)
   if kind == "missing" then errors.fail(who, "models file %s does not exist", path) end
   if kind ~= "file" then
      errors.fail(who, "models file %s is %s, not a file", path, kind == "dir" and "a directory"
         or "something else")
   end
   local real = files.real_path(path)
   if loaded[real] then return loaded[real] end
   local chunk, err = loadfile(path)
   if chunk == nil then
      -- loadfile's "path:3: '=' expected near 'x'": said as the file's line
      local line, what = tostring(err):match(":(%d+): (.*)$")
      errors.fail(who, "models file %s has a syntax error on line %s: %s", path, line or "?",
         what or tostring(err))
   end
   -- a models file may load another (a base it derives from): the outer one's state kept
   local outer = loading
   loading = { path = path }
   local ok, result = pcall(chunk, path)
   local calls_register = loading.calls_register
   loading = outer
   if not ok and calls_register then
      errors.fail(who, "models file %s calls lw.models.register (line %s): a models file returns "
         .. "its entries instead, which lw.models.load registers", path,
         tostring(result):match("^[^\n]-:(%d+): ") or "?")
   end
   if not ok then
      errors.fail(who, "models file %s failed while it ran: %s", path,
         errors.plain(tostring(result)))
   end
   -- every entry checked before any is registered: a bad file registers nothing
   local list, names, seen = entries_of(result, path), {}, {}
   for i, entry in ipairs(list) do
      local bad = type(entry) ~= "table" and ("its entry %d is a %s, not an entry"):format(i,
         type(entry)) or refusal(entry)
      if bad == nil and seen[entry.name] then
         bad = ("it returns two models named '%s'"):format(entry.name)
      end
      if bad then errors.fail(who, "models file %s: %s", path, bad) end
      seen[entry.name] = true
   end
   for _, entry in ipairs(list) do
      models.register(entry, who)
      entry.file = real
      names[#names + 1] = entry.name
   end
   loaded[real] = names
   return names
end

-- The entry of model `name` that something recorded (what: "checkpoint ck/step-3", a file),
-- or an error that says which models file to pass: the one the record names (file, a hint from
-- training: never run by itself), else any that registers the model.
function models.recorded(name, what, file)
   for _, n in ipairs(NAMES) do
      if n == name then return models.get(name) end
   end
   if type(file) == "string" and file ~= "" then
      errors.fail(nil, "%s holds model '%s' (registered by %s when it was trained): pass "
         .. "--models %s", what, tostring(name), file, file)
   end
   errors.fail(nil, "%s holds model '%s', which no models file loaded here registers (the "
      .. "known models: %s): pass --models FILE, the models file that registers it", what,
      tostring(name), table.concat(NAMES, ", "))
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
