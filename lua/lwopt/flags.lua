-- flags.lua: command-line flags for bin/lwopt and recipes. A flag list is data:
-- { { "dp", "int", 1, "data-parallel size" }, { "json", "bool", false, "print JSON" }, ... }
-- with kinds int, size (an element count, suffixes K, M, G = 10^3, 10^6, 10^9), number, string,
-- bool, or a list of allowed strings. "--n-layer 12" and "--n-layer=12" set n_layer.
local flags = {}

local function kind_text(kind)
   return type(kind) == "table" and table.concat(kind, "|") or kind
end

local multipliers = { K = 1e3, M = 1e6, G = 1e9 }

local function convert(name, kind, text)
   if type(kind) == "table" then
      for _, choice in ipairs(kind) do
         if text == choice then return text end
      end
      return nil, ("--%s must be one of %s, got '%s'"):format(name, kind_text(kind), text)
   end
   if kind == "string" then return text end
   if kind == "number" then
      local v = tonumber(text)
      if v == nil then return nil, ("--%s expects a number, got '%s'"):format(name, text) end
      return v
   end
   if kind == "int" or kind == "size" then
      local digits, suffix = text:match("^(%-?%d+)([KMG]?)$")
      if digits == nil or (suffix ~= "" and kind ~= "size") then
         return nil, ("--%s expects %s, got '%s'"):format(name,
            kind == "size" and "an element count such as 40M" or "an integer", text)
      end
      return tonumber(digits) * (multipliers[suffix] or 1)
   end
   error("flags: unknown kind " .. tostring(kind), 0)
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
         if f == nil then return nil, ("unknown flag --%s"):format(name) end
         local key = name:gsub("-", "_")
         if f[2] == "bool" then
            if inline ~= nil then return nil, ("--%s takes no value"):format(name) end
            values[key] = true
         else
            local text = inline
            if text == nil then
               i = i + 1
               text = argv[i]
               if text == nil then return nil, ("--%s needs a value"):format(name) end
            end
            local v, err = convert(name, f[2], text)
            if v == nil then return nil, err end
            values[key] = v
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
      local left = "--" .. f[1] .. (f[2] == "bool" and "" or (" " .. value))
      local default = (f[3] ~= nil and f[2] ~= "bool") and (" (default " .. tostring(f[3]) .. ")")
         or ""
      lines[#lines + 1] = ("  %-28s %s%s"):format(left, f[4] or "", default)
   end
   return table.concat(lines, "\n")
end

return flags
