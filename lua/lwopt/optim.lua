-- optim.lua: lw.optim.new, the optimizer over lw.ddp buffers (src/core/optimizer.c): Muon on
-- the matrices each rank owns, AdamW on its elements, options named as in docs/algorithms.md
-- sections 6-7. Parameters fall into hyper-parameter groups by (optimizer, lr, weight decay,
-- option tables), taken from the routing rule's opts, the optimizer's options, and the
-- defaults; a group whose routing rule gives option tables (opts.muon) gets its own options.
-- Under tensor parallelism (section 9) tp_comm is the rank's TP group and muon.tp_mode /
-- muon.split_qkv say how Muon treats the TP shards and the fused QKV weights (the specs' tp and
-- qkv fields).
local ffi = require("ffi")
local C = require("lwopt.C")
local comm_mod = require("lwopt.comm")
local errors = require("lwopt.errors")
local options = require("lwopt.options")
local kinds = require("lwopt.optim_kinds")

local lib = C.lib
local optim = {}

-- The optimizer rules the library has, by name and in order (lwopt/optim_kinds.lua).
optim.kinds = kinds

local Optimizer = {}
Optimizer.__index = Optimizer

local WHERE = "lw.optim.new"

local fail = errors.failer(WHERE)

-- The named coefficient sets, from C (lw_ns_coeffs_name) but "custom": a list of {a, b, c}
-- stands for that one.
local coefficient_sets = {}
for _, name in ipairs(C.names("ns_coeffs")) do
   if C.value("ns_coeffs", name) ~= lib.LW_NS_CUSTOM then
      coefficient_sets[#coefficient_sets + 1] = name
   end
end

-- The value of name in enum kind when it is one of names (a list of that enum's names), else
-- the message "unknown <option> 'name' (<names>...)".
local function choice(kind, name, names, option, tail)
   for _, known in ipairs(names) do
      if name == known then return C.value(kind, name) end
   end
   fail("unknown %s '%s' (%s%s)", option, tostring(name), table.concat(names, ", "), tail or "")
end

local function pick(value, default) if value == nil then return default end return value end

-- Muon's coefficients (m.coefficients: a set's name, or a list of {a, b, c} with
-- coefficients_repeat) into c (lw_muon_options): coeffs, and for a list custom, n_custom and
-- custom_repeat; out.keep holds the list's array, which c borrows.
local function set_coefficients(c, m, out)
   local coeffs = pick(m.coefficients, C.name("ns_coeffs", c.coeffs))
   if type(coeffs) == "string" then
      c.coeffs = choice("ns_coeffs", coeffs, coefficient_sets, "muon.coefficients",
         ", or a list of {a, b, c}")
   elseif type(coeffs) == "table" then
      if #coeffs == 0 then fail("muon.coefficients is an empty list") end
      local keep = ffi.new("float[?]", 3 * #coeffs)
      for i, abc in ipairs(coeffs) do
         if type(abc) ~= "table" or #abc ~= 3 then
            fail("muon.coefficients[%d] must be {a, b, c}", i)
         end
         for j = 1, 3 do
            if type(abc[j]) ~= "number" then
               fail("muon.coefficients[%d][%d] is not a number", i, j)
            end
            keep[3 * (i - 1) + j - 1] = abc[j]
         end
      end
      c.coeffs = lib.LW_NS_CUSTOM
      c.custom = keep
      c.n_custom = #coeffs
      c.custom_repeat = m.coefficients_repeat == true
      out.keep = keep
   else
      fail("muon.coefficients must be a name or a list of {a, b, c}")
   end
end

-- custom, n_custom and custom_repeat: set with coeffs, by set_coefficients.
local function filled_by_coefficients() end

-- Muon's options as presets (muon.variant), under their lw.optim.new names; a key given beside
-- the variant wins. default: the library's defaults. nanochat: nanochat's Muon step
-- (github.com/karpathy/nanochat, nanochat/optim.py, muon_step_fused) but its variance
-- reduction, which the normuon rule adds: Nesterov momentum 0.95, its five Polar Express
-- triples after dividing by 1.01 ||U||_F + 1e-6, row equilibration and renormalisation around
-- them, the step scaled by sqrt(max(1, rows / cols)), and weight decay lr * scale * wd applied
-- where update and weight agree in sign (docs/algorithms.md section 6).
optim.muon_variants = {
   default = {},
   nanochat = { momentum = 0.95, nesterov = true, ns_steps = 5, coefficients = "nanochat",
                row_equilibrate = true, renormalize = true, cautious_wd = true,
                weight_decay_mode = "scaled", scale = "shape_scaling", extra_scale = 1 },
}
local VARIANT_NAMES = { "default", "nanochat" }

-- The muon table m with its variant's settings under the keys m does not give (m itself when
-- it names none).
local function with_variant(m)
   if m.variant == nil then return m end
   local preset = optim.muon_variants[m.variant]
   if type(m.variant) ~= "string" or preset == nil then
      fail("unknown muon.variant '%s' (%s)", tostring(m.variant), table.concat(VARIANT_NAMES,
         ", "))
   end
   local out = {}
   for k, v in pairs(preset) do out[k] = v end
   for k, v in pairs(m) do if k ~= "variant" then out[k] = v end end
   return out
end

-- What lw.optim.new takes, one table per C struct: the fields of lw_optimizer_options and of
-- its muon, adamw and lion structs under their C names, with the kinds the cdef gives them
-- (lwopt.options), and what Lua adds or names otherwise. extra: Lua's own keys and their kinds
-- (each group's lr and weight decay, which a routing rule may set per parameter; the mode the
-- buffers were made for; Muon's coefficients). internal: fields with no key of their own.
-- renamed: a field under its Lua name. own: fields this module fills itself. Pointers
-- (tp_comm) are set after, from a communicator. A new field of these structs is an option here
-- with nothing to add.
local TABLES = {
   [""] = { struct = "lw_optimizer_options",
      extra = { mode = "any", lr = "number", weight_decay = "number" } },
   muon = { struct = "lw_muon_options",
      extra = { lr = "number", weight_decay = "number", coefficients = "any", variant = "any" },
      internal = { coeffs = true, custom = true, n_custom = true },
      renamed = { custom_repeat = "coefficients_repeat" },
      own = { coeffs = set_coefficients, custom = filled_by_coefficients,
              n_custom = filled_by_coefficients, custom_repeat = filled_by_coefficients } },
}
-- Each rule's table: the field of lw_optimizer_options named after the rule (a nested struct:
-- lw_adamw_options for adamw), with the lr and weight decay of its parameters' groups; Muon's
-- entry above adds its own keys. A rule without options has no table.
local RULE_TABLES = {}
for _, kind in ipairs(kinds) do
   local f = options.field("lw_optimizer_options", kind.name)
   if f ~= nil and f.kind == "struct" then
      TABLES[kind.name] = TABLES[kind.name] or { struct = f.ctype:gsub("^struct%s+", ""),
         extra = { lr = "number", weight_decay = "number" } }
      RULE_TABLES[#RULE_TABLES + 1] = kind.name
   end
end

-- The Lua keys of the table at path and their kinds.
local function kinds_of(path)
   local t = TABLES[path]
   if t.kinds == nil then
      t.kinds = {}
      for _, f in ipairs(options.fields(t.struct)) do
         if not (t.internal and t.internal[f.name]) then
            t.kinds[t.renamed and t.renamed[f.name] or f.name] = f.kind
         end
      end
      for k, kind in pairs(t.extra) do t.kinds[k] = kind end
   end
   return t.kinds
end

-- The table of options at path ("", or a rule's: "muon", "adamw", "lion"; {} for nil), every
-- key known; f: how to fail (default lw.optim.new's).
local function check_keys(t, path, f)
   f = f or fail
   if t == nil then return {} end
   if type(t) ~= "table" then f("%s must be a table", path) end
   local allowed = kinds_of(path)
   for k in pairs(t) do
      if not allowed[k] then
         f("unknown option '%s%s'", path == "" and "" or path .. ".", tostring(k))
      end
   end
   return t
end

-- Checks the kinds of a table's numbers and booleans (ranges are the C library's checks, which
-- name the value); the enums are checked as they are filled in, the rest where they are read.
local function check_types(t, path, f)
   f = f or fail
   local kinds = kinds_of(path)
   for k, v in pairs(t) do
      local kind = kinds[k]
      local name = (path == "" and "" or path .. ".") .. k
      if not options.is(kind, v) then
         if kind == "boolean" then
            f("%s must be true or false, got %s", name, options.shown(v))
         end
         f("%s must be a finite %s, got %s", name, kind, options.shown(v))
      end
   end
end

-- Options of a rule's table that are the whole optimizer's (the C library's lw_optimizer_set_
-- group_options refuses a group's own): Muon's TP shards are laid out by them.
local WHOLE_OPTIMIZER = { muon = { tp_mode = true, split_qkv = true } }

-- The option tables a rule's parameters read: its own, and Muon's for NorMuon, whose step is
-- Muon's before its variance reduction. A routing rule's opts may hold these for its
-- parameters alone.
local function tables_read_by(rule)
   local out = {}
   if rule == "normuon" then out[#out + 1] = "muon" end
   if TABLES[rule] ~= nil then out[#out + 1] = rule end
   return out
end
optim.tables_read_by = tables_read_by

-- Checks a routing rule's option table opts[path] for its rule (f: how to fail): a table that
-- rule reads, every key known and of its kind (lw.route calls it on each rule).
function optim.check_rule_table(rule, path, t, f)
   local known = tables_read_by(rule)
   local ok = false
   for _, name in ipairs(known) do ok = ok or name == path end
   if not ok then
      f("unknown option '%s' in opts (a rule sets lr, weight_decay%s)", path,
         #known > 0 and (" and its optimizer's option tables: " .. table.concat(known, ", "))
         or "")
   end
   check_keys(t, path, f)
   check_types(t, path, f)
   for _, key in ipairs({ "lr", "weight_decay" }) do
      if t[key] ~= nil then
         f("opts.%s.%s: a routing rule sets %s in opts itself", path, key, key)
      end
   end
   for key in pairs(WHOLE_OPTIMIZER[path] or {}) do
      if t[key] ~= nil then
         f("opts.%s.%s is the whole optimizer's, not a routing rule's: give it to "
            .. "lw.optim.new", path, key)
      end
   end
end

-- Fills the C struct c from the Lua tables (tables[path]: the options at path), field by field
-- in the struct's order: numbers and booleans given, enums by their C names (unknown: "unknown
-- muon.scale 'x' (spectral, ...)"), nested structs from their own tables; out.keep: what the
-- struct borrows (the custom coefficients).
local function fill(c, path, tables, out)
   local t, values = TABLES[path], tables[path]
   for _, f in ipairs(options.fields(t.struct)) do
      local key = t.renamed and t.renamed[f.name] or f.name
      local name = (path == "" and "" or path .. ".") .. key
      if t.own and t.own[f.name] then
         t.own[f.name](c, values, out)
      elseif f.kind == "struct" then
         fill(c[f.name], key, tables, out)
      elseif f.kind == "enum" then
         c[f.name] = choice(f.enum, pick(values[key], C.name(f.enum, c[f.name])), C.names(f.enum),
            name)
      elseif f.kind ~= "pointer" and values[key] ~= nil then
         c[f.name] = values[key]
      end
   end
end

-- The C options from the tables by path, and a keep-alive for the custom coefficient array.
local function c_options(tables)
   local c, out = lib.lw_optimizer_defaults(), {}
   fill(c, "", tables, out)
   return c, out.keep
end

-- AdamW decays matrices, not gains, biases or embeddings (docs/algorithms.md section 7).
local function adamw_decays(spec)
   return #spec.shape == 2 and spec.role ~= "embedding" and not spec.shared_embedding
end

-- A table's keys and values as text, keys sorted: equal tables, equal text.
local function signature(t)
   if type(t) ~= "table" then return type(t) .. ":" .. tostring(t) end
   local keys, out = {}, {}
   for k in pairs(t) do keys[#keys + 1] = k end
   table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
   for _, k in ipairs(keys) do out[#out + 1] = tostring(k) .. "=" .. signature(t[k]) end
   return "{" .. table.concat(out, ",") .. "}"
end

-- The option tables of a routing rule's own (rule_opts[name] for the tables its optimizer
-- reads) over tables (lw.optim.new's by path), key by key, Muon's variant applied after; nil
-- when the routing rule sets none.
local function own_tables(kind, rule_opts, tables, given)
   local own
   for _, path in ipairs(tables_read_by(kind)) do
      if rule_opts[path] ~= nil then
         own = own or setmetatable({}, { __index = tables })
         local merged = {}
         for k, v in pairs(given[path] or {}) do merged[k] = v end
         for k, v in pairs(rule_opts[path]) do merged[k] = v end
         own[path] = path == "muon" and with_variant(merged) or merged
      end
   end
   return own
end

-- A parameter's group: its rule, and lr and weight decay from its routing rule's opts, else its
-- optimizer rule's options (by_rule[name]: o.muon, o.adamw), else the top level's; and the
-- option tables its routing rule gives its rule (nil: lw.optim.new's). Whole-matrix rules decay
-- every matrix they update; element-wise ones as AdamW does.
local function group_of(spec, o, by_rule, given)
   local rule, ko = spec.opts or {}, by_rule[spec.optimizer] or {}
   local lr = pick(rule.lr, pick(ko.lr, pick(o.lr, 1e-3)))
   local decays = kinds[spec.optimizer].whole or adamw_decays(spec)
   local default_wd = decays and pick(ko.weight_decay, pick(o.weight_decay, 0.1)) or 0
   return spec.optimizer, lr, pick(rule.weight_decay, default_wd),
      own_tables(spec.optimizer, rule, by_rule, given)
end

-- The TP group as the C optimizer takes it: tp itself when it moves the buffers' memory (or
-- under blockwise, which has no collectives), else a device communicator over it (collective).
local function tp_for(tp, d, mode)
   if tp == nil then return nil end
   if type(tp) ~= "table" or tp._c == nil then
      fail("tp_comm must be a communicator (lw.comm), got %s", type(tp))
   end
   if tp.size == 1 or mode == lib.LW_MUON_TP_BLOCKWISE or tp:reaches(d.device) then return tp end
   return comm_mod.device(tp, d.device)
end

-- The C options (an lw_optimizer_options) lw.optim.new would make of opts, and a keep-alive of
-- what they borrow (custom coefficients); opts checked as lw.optim.new checks them.
function optim.c_options(opts)
   local o = check_keys(opts, "")
   check_types(o, "")
   local tables, given = { [""] = o }, {}
   for _, path in ipairs(RULE_TABLES) do
      tables[path] = check_keys(o[path], path)
      given[path] = tables[path]
      if path == "muon" then tables[path] = with_variant(tables[path]) end
      check_types(tables[path], path)
   end
   local c, keep = c_options(tables)
   return c, keep, tables, given
end

-- lw.optim.new(ddp, opts): opts = { mode, lr, weight_decay, clip, tp_comm, muon = { variant,
-- lr, weight_decay, momentum, nesterov, ns_steps, coefficients, coefficients_repeat,
-- weight_decay_mode, scale, extra_scale, eps, symmetric, precision, tp_mode, split_qkv,
-- row_equilibrate, renormalize, cautious_wd },
-- adamw = { lr, weight_decay, beta1, beta2, eps }, lion = { lr, weight_decay, beta1, beta2 } }.
-- tp_comm: this rank's tensor-parallel group
-- (an lw.comm: its ranks hold the shards of the same tensors, with ddp's built from the same
-- local specs on each); nil: no TP. muon.tp_mode: "duplicated" (default), "distributed" or
-- "blockwise"; muon.split_qkv (default true): Q, K and V of a fused QKV weight orthogonalised
-- apart. muon.variant: a preset of Muon's options (optim.muon_variants: "default",
-- "nanochat"), under the keys given beside it.
function optim.new(d, opts)
   local c, keep, tables, given = optim.c_options(opts)
   local o = tables[""]
   if o.mode ~= nil and o.mode ~= d.mode then
      fail("mode '%s' does not match the buffers, which were made for mode '%s'", tostring(o.mode),
         d.mode)
   end
   local tp = tp_for(o.tp_comm, d, c.muon.tp_mode)
   c.tp_comm = tp and tp._c or nil
   local out = ffi.new("lw_optimizer*[1]")
   C.check(lib.lw_optimizer_new(d._c, c, out), WHERE)
   local self = setmetatable({ ddp = d, mode = d.mode, groups = {}, _keep = keep,
      _lr_scale = 1, tp_comm = o.tp_comm, _tp = tp }, Optimizer)
   self._c = ffi.gc(out[0], lib.lw_optimizer_free)
   local by_key = {}
   for i, spec in ipairs(d.specs) do
      local kind, lr, wd, own = group_of(spec, o, tables, given)
      local key = kind .. "|" .. lr .. "|" .. wd .. "|" .. (own and signature(own) or "")
      local g = by_key[key]
      if g == nil then
         g = { optimizer = kind, lr = lr, weight_decay = wd, params = {}, options = own }
         self.groups[#self.groups + 1] = g
         g.index = #self.groups - 1
         by_key[key] = g
         if own ~= nil then self:_send_options(g, own, c) end
      end
      g.params[#g.params + 1] = spec.name
      C.check(lib.lw_optimizer_set_group(self._c, i - 1, g.index), WHERE)
   end
   self:_send_hparams(WHERE)
   return self
end

-- Group g's own options: the tables own (lw.optim.new's, with its routing rule's over them)
-- as a C struct beside the optimizer's c (its TP communicator), kept alive with the group.
function Optimizer:_send_options(g, own, c)
   for path in pairs(TABLES) do
      if path ~= "" and rawget(own, path) ~= nil then check_types(own[path], path) end
   end
   local tables = {}
   for path in pairs(TABLES) do tables[path] = own[path] end
   local gc, keep = c_options(tables)
   gc.tp_comm = c.tp_comm
   g._keep = keep
   C.check(lib.lw_optimizer_set_group_options(self._c, g.index, gc), WHERE)
end

function Optimizer:_send_hparams(where)
   for _, g in ipairs(self.groups) do
      C.check(lib.lw_optimizer_set_hparams(self._c, g.index, g.lr * self._lr_scale,
         g.weight_decay), where)
   end
end

-- Sets a group's lr and weight decay (groups[i], 1-based) for the following steps.
function Optimizer:set_group(i, lr, weight_decay)
   local g = self.groups[i]
   if g == nil then errors.misuse("optimizer:set_group", "no group %s", tostring(i)) end
   g.lr = lr or g.lr
   g.weight_decay = weight_decay or g.weight_decay
   self:_send_hparams("optimizer:set_group")
end

-- Bytes of optimizer state this rank holds (its rules' parts: Muon's momentum, AdamW's m and
-- v), and of its fp32 master weights (bf16 parameters; 0 for fp32), as two numbers.
function Optimizer:state_bytes()
   if self._state_bytes == nil then
      local entry, total, master = ffi.new("lw_state_entry"), 0, 0
      for k = 0, lib.lw_optimizer_state_count(self._c) - 1 do
         C.check(lib.lw_optimizer_state(self._c, k, entry), "optimizer:state_bytes")
         for i = 0, entry.n_parts - 1 do total = total + 4 * tonumber(entry.part_counts[i]) end
         if entry.master ~= nil then master = master + 4 * tonumber(entry.count) end
      end
      self._state_bytes, self._master_bytes = total, master
   end
   return self._state_bytes, self._master_bytes
end

local clipped_cell = ffi.new("int32_t[1]")

-- QK-clip of one attention layer at the next step (lw_optimizer_qk_clip): target = { weight,
-- bias (nil: none), head_dim, n_heads } (nn.Attention:qk_clip_target), maxima a float* or list
-- of its heads' largest logits (reduced over the ranks that saw other tokens), tau the logit
-- they are clipped to. Returns the heads clipped (a NaN or infinite maximum is passed over).
function Optimizer:qk_clip(target, maxima, tau)
   local n = target.n_heads
   local m = maxima
   if type(maxima) == "table" then
      m = ffi.new("float[?]", math.max(n, 1))
      for i = 1, n do m[i - 1] = maxima[i] end
   end
   local bias = target.bias and self.ddp:index(target.bias) or -1
   C.check(lib.lw_optimizer_qk_clip(self._c, self.ddp:index(target.weight), bias,
      target.head_dim, m, n, tau, clipped_cell), "optimizer:qk_clip")
   return clipped_cell[0]
end

-- Rows [first, first + count) (0-based, along the first dimension) of parameter `name` times
-- factor at the next step, after its update (lw_optimizer_scale_rows).
function Optimizer:scale_rows(name, first, count, factor)
   C.check(lib.lw_optimizer_scale_rows(self._c, self.ddp:index(name), first, count, factor),
      "optimizer:scale_rows")
end

local result = ffi.new("lw_step_result")

-- One step. lr_scale (default 1) multiplies every group's lr: schedules pass it each step.
-- Returns { ok, grad_norm, zeros, skipped, skips, step, time = { grad_sync, norm, muon, adamw,
-- param_sync, muon_comm } } (seconds; muon_comm: row-sharded Muon's gathers, part of muon); ok
-- is false when a non-finite norm skipped the update.
function Optimizer:step(lr_scale)
   lr_scale = lr_scale or 1
   if lr_scale ~= self._lr_scale then
      if type(lr_scale) ~= "number" or lr_scale < 0 then
         errors.misuse("optimizer:step", "lr_scale must be a number >= 0")
      end
      self._lr_scale = lr_scale
      self:_send_hparams("optimizer:step")
   end
   C.check(lib.lw_optimizer_step(self._c, result), "optimizer:step")
   return {
      ok = not result.skipped, grad_norm = result.grad_norm, zeros = tonumber(result.zeros),
      skipped = result.skipped, skips = tonumber(result.skips), step = tonumber(result.step),
      time = { grad_sync = result.seconds_grad_sync, norm = result.seconds_norm,
               muon = result.seconds_muon, adamw = result.seconds_adamw,
               param_sync = result.seconds_param_sync, muon_comm = result.seconds_muon_comm },
   }
end

return optim
