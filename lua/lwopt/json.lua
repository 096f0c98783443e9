-- json.lua: a small JSON encoder for layouts, logs and manifests. Objects are written with
-- sorted keys so that equal values give equal text; json.object marks a table (even an empty
-- one) as an object, json.array as an array.
local errors = require("lwopt.errors")

local json = {}

local object_mt = { __jsontype = "object" }
local array_mt = { __jsontype = "array" }

-- json.null encodes as null where a nil would drop the key.
json.null = setmetatable({}, { __jsontype = "null", __tostring = function() return "null" end })

function json.object(t) return setmetatable(t or {}, object_mt) end
function json.array(t) return setmetatable(t or {}, array_mt) end

local escapes = {
   ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
   ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
}

local function encode_string(s)
   return '"' .. s:gsub('[%c"\\]', function(c)
      return escapes[c] or string.format("\\u%04x", c:byte())
   end) .. '"'
end

-- The shortest of %.15g, %.16g and %.17g that reads back as the same double (%.17g always
-- does), so that a log's 9.32 is written 9.32, not 9.3200000000000003, and every float still
-- comes back bit for bit; integers below 2^53 as integers, negative zero as -0 (its sign kept).
-- Not finite: null (JSON has no NaN or infinity).
local function encode_number(n)
   if n ~= n or n == math.huge or n == -math.huge then return "null" end
   if n == 0 then return 1 / n < 0 and "-0" or "0" end
   if n == math.floor(n) and math.abs(n) < 2 ^ 53 then return string.format("%d", n) end
   for _, form in ipairs({ "%.15g", "%.16g" }) do
      local s = string.format(form, n)
      if tonumber(s) == n then return s end
   end
   return string.format("%.17g", n)
end

local function is_array(t)
   local mt = getmetatable(t)
   if mt == array_mt then return true end
   if mt == object_mt then return false end
   local n = #t
   if n == 0 then return next(t) == nil end
   local count = 0
   for _ in pairs(t) do count = count + 1 end
   return count == n
end

local encode

local function encode_table(t, indent, depth)
   local nl, pad, inner = "", "", ""
   if indent then
      nl = "\n"
      pad = string.rep(indent, depth)
      inner = string.rep(indent, depth + 1)
   end
   local parts = {}
   if is_array(t) then
      if #t == 0 then return "[]" end
      for i = 1, #t do parts[i] = inner .. encode(t[i], indent, depth + 1) end
      return "[" .. nl .. table.concat(parts, "," .. nl) .. nl .. pad .. "]"
   end
   local keys = {}
   for k in pairs(t) do
      if type(k) ~= "string" then
         errors.fail("json.encode", "object key %s is not a string", tostring(k))
      end
      keys[#keys + 1] = k
   end
   if #keys == 0 then return "{}" end
   table.sort(keys)
   local sep = indent and ": " or ":"
   for i, k in ipairs(keys) do
      parts[i] = inner .. encode_string(k) .. sep .. encode(t[k], indent, depth + 1)
   end
   return "{" .. nl .. table.concat(parts, "," .. nl) .. nl .. pad .. "}"
end

encode = function(v, indent, depth)
   local kind = type(v)
   if kind == "nil" then return "null" end
   if kind == "boolean" then return tostring(v) end
   if kind == "number" then return encode_number(v) end
   if kind == "string" then return encode_string(v) end
   if v == json.null then return "null" end
   if kind == "table" then return encode_table(v, indent, depth) end
   errors.fail("json.encode", "cannot encode a %s", kind)
end

-- JSON text of v; indent (e.g. "  ") pretty-prints.
function json.encode(v, indent)
   return encode(v, indent, 0)
end

-- Lua value of JSON text, through lwopt's strict C parser (src/core/json.c): objects become
-- tables with json.object's mark, arrays json.array's, null json.null. Errors name the byte.
function json.decode(text)
   local ffi = require("ffi")
   local C = require("lwopt.C")
   local lib = C.lib
   local out = ffi.new("lw_json*[1]")
   C.check(lib.lw_json_parse(text, #text, out), "json.decode")
   local doc = ffi.gc(out[0], lib.lw_json_free)
   local len = ffi.new("int64_t[1]")
   local function value(node)
      local kind = tonumber(lib.lw_json_type_of(doc, node))
      if kind == lib.LW_JSON_NULL then return json.null end
      if kind == lib.LW_JSON_FALSE then return false end
      if kind == lib.LW_JSON_TRUE then return true end
      if kind == lib.LW_JSON_NUMBER then return lib.lw_json_number(doc, node) end
      if kind == lib.LW_JSON_STRING then
         local s = lib.lw_json_string(doc, node, len)
         return ffi.string(s, len[0])
      end
      local t = kind == lib.LW_JSON_ARRAY and json.array() or json.object()
      for i = 0, lib.lw_json_length(doc, node) - 1 do
         local child = value(lib.lw_json_child(doc, node, i))
         if kind == lib.LW_JSON_ARRAY then t[i + 1] = child
         else t[ffi.string(lib.lw_json_key(doc, node, i))] = child end
      end
      return t
   end
   return value(0)
end

return json
