-- route.lua: decides which optimizer updates each parameter. Rules are data: an ordered list of
-- { match = <Lua pattern on the name> | function(spec) -> bool, optimizer = <a rule's name:
-- "muon", "adamw", ... (lw.optim.kinds)>, opts = { lr, weight_decay, and option tables of its
-- optimizer for its parameters alone: muon = {...}, adamw = {...}, ... }, optional = true };
-- the first match wins, a parameter that no rule matches is an error, and a rule that routes
-- no parameter is warned about unless it is optional (a generic list may not fit every model).
local errors = require("lwopt.errors")
local kinds = require("lwopt.optim_kinds")
local optim = require("lwopt.optim")

local route = {}

local fail = errors.failer("lw.route")

local function is_matrix(spec) return #spec.shape == 2 end

-- docs/algorithms.md section 1: Muon for 2-D weights that are not embeddings or the LM head and
-- were not excluded; a shared embedding is never Muon; AdamW for everything else.
route.default_rules = {
   { name = "excluded from Muon", optional = true, optimizer = "adamw",
     match = function(s) return s.use_muon == false end },
   { name = "shared embedding", optional = true, optimizer = "adamw",
     match = function(s) return s.shared_embedding == true end },
   { name = "asked for Muon", optional = true, optimizer = "muon",
     match = function(s) return s.use_muon == true end },
   { name = "embedding or output", optional = true, optimizer = "adamw",
     match = function(s) return s.role == "embedding" or s.role == "output" end },
   -- per-layer scalars (nanochat's residual scalars), whatever their shape
   { name = "scalar", optional = true, optimizer = "adamw",
     match = function(s) return s.role == "scalar" end },
   { name = "matrix", optional = true, optimizer = "muon", match = is_matrix },
   { name = "everything else", optional = true, optimizer = "adamw",
     match = function() return true end },
}

-- The numbers a rule's opts may set for its parameters (lw.optim.new reads them per parameter;
-- its optimizer's option tables are checked by lw.optim).
local RULE_OPTS = { lr = true, weight_decay = true }

local function shape_text(shape)
   local dims = {}
   for i, d in ipairs(shape) do dims[i] = tostring(d) end
   return "{" .. table.concat(dims, ", ") .. "}"
end

local function check_rules(rules)
   if type(rules) ~= "table" then
      fail("rules must be a list of rules, got %s", type(rules))
   end
   if #rules == 0 then fail("the rule list is empty") end
   for i, rule in ipairs(rules) do
      if type(rule) ~= "table" then
         fail("rule %d is a %s, not a table", i, type(rule))
      end
      local kind = type(rule.match)
      if kind ~= "string" and kind ~= "function" then
         fail("rule %d: match must be a Lua pattern or a function, got %s", i, kind)
      end
      if kind == "string" then
         local ok, err = pcall(string.find, "", rule.match)
         if not ok then
            fail("rule %d: bad pattern '%s': %s", i, rule.match, err)
         end
      end
      kinds.get(rule.optimizer, "lw.route", ("rule %d: optimizer"):format(i))
      if rule.optional ~= nil and type(rule.optional) ~= "boolean" then
         fail("rule %d: optional must be true or false, got %s", i, tostring(rule.optional))
      end
      if rule.opts ~= nil and type(rule.opts) ~= "table" then
         fail("rule %d: opts must be a table", i)
      end
      for key, value in pairs(rule.opts or {}) do
         if not RULE_OPTS[key] then
            optim.check_rule_table(rule.optimizer, key, value, function(fmt, ...)
               fail("rule %d: " .. fmt, i, ...)
            end)
         elseif type(value) ~= "number" or value ~= value or value < 0 or value == math.huge then
            fail("rule %d: opts.%s must be a finite number >= 0, got %s", i, key,
               type(value) == "string" and ("'" .. value .. "'") or tostring(value))
         end
      end
   end
end

local function rule_label(rules, i)
   local name = rules[i].name
   return name and ("rule %d (%s)"):format(i, name) or ("rule %d"):format(i)
end

local function matches(rule, spec)
   if type(rule.match) == "string" then return spec.name:find(rule.match) ~= nil end
   return rule.match(spec) and true or false
end

-- One line per rule, not optional, that routed none of specs (used[i]: rule i routed one),
-- naming it by index, name and pattern, and saying whether it matched nothing or only
-- parameters an earlier rule took.
local function unused_texts(specs, used, rules)
   local out = {}
   for i, rule in ipairs(rules) do
      if not used[i] and not rule.optional then
         local shadowed = false
         for _, spec in ipairs(specs) do
            if matches(rule, spec) then shadowed = true break end
         end
         out[#out + 1] = ("%s, match %s, %s (optional = true in the rule silences this)")
            :format(rule_label(rules, i), type(rule.match) == "string" and ("'" .. rule.match
            .. "'") or "a function", shadowed and "matched only parameters an earlier rule took"
            or "matched no parameter")
      end
   end
   return out
end

-- Where lw.route's warnings go unless opts.warn says: stderr, on the launcher's rank 0 only.
local function warn_stderr(text)
   local ok, comm = pcall(require, "lwopt.comm")
   if ok and comm.launched() ~= 0 then return end
   io.stderr:write("lw.route: warning: ", text, "\n")
   io.stderr:flush()
end

-- Routes specs with rules (default: route.default_rules). Returns new spec tables, each a copy
-- with .optimizer (the rule's name) and .opts (the rule's opts, or nil) added. Each rule that
-- routed no parameter, unless optional, is warned about once: opts.warn(text) (default: stderr
-- on rank 0; false: not at all).
local function route_specs(specs, rules, opts)
   rules = rules or route.default_rules
   if type(specs) ~= "table" then fail("specs must be a list, got %s", type(specs)) end
   check_rules(rules)
   local routed, used = {}, {}
   for n, spec in ipairs(specs) do
      if type(spec) ~= "table" or type(spec.name) ~= "string" or type(spec.shape) ~= "table" then
         fail("spec %d needs a string name and a shape table", n)
      end
      local chosen
      for i, rule in ipairs(rules) do
         if matches(rule, spec) then
            chosen = i
            break
         end
      end
      if chosen == nil then
         fail("no rule matches parameter '%s' (shape %s, role %s)", spec.name,
            shape_text(spec.shape), tostring(spec.role))
      end
      local rule = rules[chosen]
      local whole = kinds[rule.optimizer].whole
      if whole and spec.shared_embedding then
         fail("%s sends shared embedding '%s' to %s; a shared embedding is used as "
            .. "embedding and LM head and must use an element-wise rule (adamw)",
            rule_label(rules, chosen), spec.name, rule.optimizer)
      end
      if whole and not is_matrix(spec) then
         fail("%s sends '%s' (shape %s) to %s, which needs a 2-D matrix",
            rule_label(rules, chosen), spec.name, shape_text(spec.shape), rule.optimizer)
      end
      local copy = {}
      for k, v in pairs(spec) do copy[k] = v end
      copy.optimizer = rule.optimizer
      copy.opts = rule.opts
      used[chosen] = true
      routed[n] = copy
   end
   local warn = (opts or {}).warn
   if warn == nil then warn = warn_stderr end
   if warn and type(warn) ~= "function" then
      fail("opts.warn must be a function or false, got %s", type(warn))
   end
   if warn then
      for _, text in ipairs(unused_texts(specs, used, rules)) do warn(text) end
   end
   return routed, used
end

-- The warnings lw.route would give routing specs with rules, as a list of lines (without
-- "warning: "), for a caller that routes a part of the model and warns about the whole.
function route.unused(specs, rules)
   rules = rules or route.default_rules
   local _, used = route_specs(specs, rules, { warn = false })
   return unused_texts(specs, used, rules)
end

-- The specs, with those that have no .optimizer yet routed by the default rules (the others
-- kept as they are). `where` prefixes the errors (the calling function's name).
function route.fill(specs, where)
   if type(specs) ~= "table" then
      errors.fail(where, "specs must be a list, got %s", type(specs))
   end
   local out = {}
   for i, s in ipairs(specs) do
      if type(s) ~= "table" then
         errors.fail(where, "spec %d is a %s, not a table", i, type(s))
      end
      out[i] = s.optimizer ~= nil and s or route_specs({ s }, nil, { warn = false })[1]
   end
   return out
end

route.route = function(specs, rules, opts) return (route_specs(specs, rules, opts)) end
route.shape_text = shape_text

return setmetatable(route, { __call = function(_, specs, rules, opts)
   return (route_specs(specs, rules, opts))
end })
