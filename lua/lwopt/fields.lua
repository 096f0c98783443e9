-- fields.lua: a config table checked against a list of fields, as models and lw.arch take
-- them. A field is { key, kind, default, values }: kind "size" (an integer in [1, 2^53)),
-- "count" (an integer >= 0), "coef" (a finite number >= 0), "bool", "dtype" (a spec's element
-- type), "choice" (one of the strings in values), "string" (a string of the characters in
-- values, a string itself) or "any" (passed as given); no default means
-- required, a function default is computed from the fields checked before it (nil: absent).
-- Fields are checked in list order, so that the first error reported is always the same one.
local fields = {}

local DTYPES = { f32 = true, bf16 = true, f16 = true }

local function show(v)
   if type(v) == "string" then return string.format("%q", v) end
   return tostring(v)
end

function fields.is_size(v)
   -- the upper bound also rejects inf (floor(inf) == inf) and keeps numel exact in a double
   return type(v) == "number" and v == math.floor(v) and v > 0 and v < 2 ^ 53
end
local is_size = fields.is_size

-- The message for value v of field f, or nil when it is of its kind.
local function wrong(who, f, v)
   local key, kind = f[1], f[2]
   if kind == "size" and not is_size(v) then
      return ("%s: %s (%s) must be a positive integer"):format(who, key, show(v))
   elseif kind == "count" and not (v == 0 or is_size(v)) then
      return ("%s: %s (%s) must be an integer >= 0"):format(who, key, show(v))
   elseif kind == "coef" and not (type(v) == "number" and v >= 0 and v < math.huge) then
      return ("%s: %s (%s) must be a finite number >= 0"):format(who, key, show(v))
   elseif kind == "bool" and type(v) ~= "boolean" then
      return ("%s: %s (%s) must be a boolean"):format(who, key, show(v))
   elseif kind == "string" and (type(v) ~= "string" or v:find("[^" .. f[4] .. "]")) then
      return ("%s: %s (%s) must be a string of the characters %s"):format(who, key, show(v),
         f[4]:gsub(".", "%0, "):sub(1, -3))
   elseif kind == "dtype" and not DTYPES[v] then
      return ("%s: %s (%s) must be one of \"f32\", \"bf16\", \"f16\""):format(who, key, show(v))
   elseif kind == "choice" then
      for _, ok in ipairs(f[4]) do if v == ok then return nil end end
      local values = "'" .. f[4][#f[4]] .. "'"
      if #f[4] > 1 then
         values = "'" .. table.concat(f[4], "', '", 1, #f[4] - 1) .. "' or " .. values
      end
      return ("%s: %s must be %s, got %s"):format(who, key, values,
         type(v) == "string" and ("'" .. v .. "'") or tostring(v))
   end
   return nil
end

-- cfg checked against the lists (each a list of fields; later lists after earlier ones):
-- a new table of the values with defaults filled, or nil and "who: what is wrong".
function fields.check(who, cfg, ...)
   if type(cfg) ~= "table" then
      return nil, ("%s: config must be a table, got %s"):format(who, type(cfg))
   end
   local list = {}
   for _, l in ipairs({ ... }) do for _, f in ipairs(l) do list[#list + 1] = f end end
   local known = {}
   for _, f in ipairs(list) do known[f[1]] = true end
   -- sorted so that with several typos the reported one does not depend on pairs() order
   local unknown = {}
   for k in pairs(cfg) do
      if not known[k] then unknown[#unknown + 1] = tostring(k) end
   end
   if #unknown > 0 then
      table.sort(unknown)
      return nil, ("%s: unknown field '%s'"):format(who, unknown[1])
   end
   local c = {}
   for _, f in ipairs(list) do
      local key, default = f[1], f[3]
      local v = cfg[key]
      if v == nil then
         if default == nil then
            return nil, ("%s: missing required field '%s'"):format(who, key)
         elseif type(default) == "function" then
            v = default(c)
         else
            v = default
         end
      end
      if v ~= nil then
         local err = wrong(who, f, v)
         if err then return nil, err end
      end
      c[key] = v
   end
   return c
end

-- The keys of the lists, in order.
function fields.keys(...)
   local out = {}
   for _, l in ipairs({ ... }) do for _, f in ipairs(l) do out[#out + 1] = f[1] end end
   return out
end

return fields
