-- flags.lua: command-line flags for bin/lwopt and recipes. A flag list is data:
-- { { "dp", "int", 1, "data-parallel size", min = 1, max = 65536 }, { "json", "bool", false,
-- "print JSON" }, ... } with kinds int, size (an element count, suffixes K, M, G = 10^3, 10^6,
-- 10^9), number, string, bool, or a list of allowed strings; min and max bound numbers, above
-- bounds them from below excluding the bound itself (a learning rate: above = 0; ints and
-- sizes are always within +-2^53, where every integer is exact); `bare` is the value a flag
-- takes when it is given without one (last, or followed by another flag): { "model-step",
-- { "a", "b" }, nil, "...", bare = "a" } reads "--model-step" as "--model-step a"; `words`
-- names values a number flag also takes by a word: { "eval-max", "int", 64, ..., words = {
-- all = "all" } } reads "--eval-max all" as "all"; `many = true` lets a flag be given again,
-- its value the list of every one given (nil when none is).
-- "--n-layer 12" and "--n-layer=12" set n_layer.
local errors = require("lwopt.errors")

local flags = {}

local EXACT = 2 ^ 53

local function kind_text(kind)
   return type(kind) == "table" and table.concat(kind, "|") or kind
end

local multipliers = { K = 1e3, M = 1e6, G = 1e9 }

-- Edit distance between two short strings (for "did you mean").
local function distance(a, b)
   local row = {}
   for j = 0, #b do row[j] = j end
   for i = 1, #a do
      local diagonal = row[0]
      row[0] = i
      for j = 1, #b do
         local above = row[j]
         row[j] = math.min(row[j] + 1, row[j - 1] + 1,
            diagonal + (a:sub(i, i) == b:sub(j, j) and 0 or 1))
         diagonal = above
      end
   end
   return row[#b]
end

-- The flag name closest to a mistyped one, if one is close: one it begins (from 3 characters),
-- or one within an edit distance of a third of its length.
local function closest(name, list)
   local best, best_score, limit = nil, math.huge, math.max(1, math.floor(#name / 3))
   for _, f in ipairs(list) do
      local score = (#name >= 3 and f[1]:sub(1, #name) == name) and 0.5 or distance(name, f[1])
      if score <= limit and score < best_score then best, best_score = f[1], score end
   end
   return best
end

local function format_number(x)
   if x == math.floor(x) and math.abs(x) < 1e15 then return ("%d"):format(x) end
   return tostring(x)
end

-- The bounds of a flag as words: "between 1 and 3", ">= 0", "> 0", "<= 8".
local function bounds_text(f)
   if f.above then
      return ("> %s"):format(format_number(f.above))
         .. (f.max and (" and <= " .. format_number(f.max)) or "")
   end
   if f.min and f.max then
      return ("between %s and %s"):format(format_number(f.min), format_number(f.max))
   end
   return f.min and (">= " .. format_number(f.min)) or ("<= " .. format_number(f.max))
end

local function check_range(f, v, text)
   if (f.min and v < f.min) or (f.above and v <= f.above) or (f.max and v > f.max) then
      return nil, ("--%s must be %s, got %s"):format(f[1], bounds_text(f), text)
   end
   return v
end

local function convert(f, text)
   local name, kind = f[1], f[2]
   if type(kind) == "table" then
      for _, choice in ipairs(kind) do
         if text == choice then return text end
      end
      return nil, ("--%s must be one of %s, got '%s'"):format(name, kind_text(kind), text)
   end
   if kind == "string" then return text end
   if f.words and f.words[text] ~= nil then return f.words[text] end
   if kind == "number" then
      local v = tonumber(text)
      if v == nil or v ~= v or v == math.huge or v == -math.huge then
         return nil, ("--%s expects a number, got '%s'"):format(name, text)
      end
      return check_range(f, v, text)
   end
   if kind == "int" or kind == "size" then
      local digits, suffix = text:match("^(%-?%d+)([KMG]?)$")
      if digits == nil or (suffix ~= "" and kind ~= "size") then
         return nil, ("--%s expects %s, got '%s'"):format(name,
            kind == "size" and "an element count such as 40M" or "an integer", text)
      end
      local v, err = check_range(f, tonumber(digits) * (multipliers[suffix] or 1), text)
      if v and math.abs(v) > EXACT then
         return nil, ("--%s is out of range, got %s"):format(name, text)
      end
      return v, err
   end
   errors.fail("flags", "unknown kind %s", tostring(kind))
end

-- Parses argv (a list of strings) against the flag list. Returns the values by name (defaults
-- filled in; dashes become underscores) and the positional arguments, or nil and a message.
function flags.parse(argv, list)
   local by_name, values, positional = {}, {}, {}
   for _, f in ipairs(list) do
      by_name[f[1]] = f
      values[f[1]:gsub("-", "_")] = f[3]
   end
   local i = 1
   while i <= #argv do
      local a = argv[i]
      local name, inline = a:match("^%-%-([%w%-]+)=(.*)$")
      if name == nil then name = a:match("^%-%-([%w%-]+)$") end
      if name == nil then
         positional[#positional + 1] = a
      else
         local f = by_name[name]
         if f == nil then
            local near = closest(name, list)
            return nil, ("unknown flag --%s%s"):format(name,
               near and (" (did you mean --" .. near .. "?)") or "")
         end
         local key = name:gsub("-", "_")
         if f[2] == "bool" then
            if inline ~= nil then return nil, ("--%s takes no value"):format(name) end
            values[key] = true
         else
            local text = inline
            if text == nil then
               local following = argv[i + 1]
               if f.bare ~= nil and (following == nil or following:match("^%-%-")) then
                  text = f.bare
               else
                  i = i + 1
                  text = following
                  if text == nil then return nil, ("--%s needs a value"):format(name) end
               end
            end
            local v, err = convert(f, text)
            if v == nil then return nil, err end
            if f.many then
               values[key] = values[key] or {}
               values[key][#values[key] + 1] = v
            else
               values[key] = v
            end
         end
      end
      i = i + 1
   end
   return values, positional
end

-- The flag list as usage lines.
function flags.usage(list)
   local lines = {}
   for _, f in ipairs(list) do
      local value = type(f[2]) == "table" and ("{" .. kind_text(f[2]) .. "}") or f[2]:upper()
      if f.words then
         local words = {}
         for w in pairs(f.words) do words[#words + 1] = w end
         table.sort(words)
         value = value .. "|" .. table.concat(words, "|")
      end
      local left = "--" .. f[1] .. (f[2] == "bool" and ""
         or f.bare ~= nil and (" [" .. value .. "]") or (" " .. value))
      local default = (f[3] ~= nil and f[2] ~= "bool") and (" (default " .. tostring(f[3]) .. ")")
         or ""
      lines[#lines + 1] = ("  %-28s %s%s"):format(left, f[4] or "", default)
   end
   return table.concat(lines, "\n")
end

return flags
