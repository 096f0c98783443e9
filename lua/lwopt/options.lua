-- options.lua: the fields of the C option structs (lw_optimizer_options, lw_muon_options,
-- lw_runtime_options, lw_buffers_options, ...) read from the declarations the build generates
-- from src/lw.h (C.declarations), so that the modules that fill them (optim, ddp) keep no hand
-- copy of a struct: which fields there are, in order, and what a Lua value for each is. A
-- field's kind follows from its C type: "number" (float, double), "integer" (the int types),
-- "boolean" (bool), "enum" (an lw_ enum, taken by its C names: C.value, C.name), "struct" (a
-- nested option struct), "pointer" (set by the module itself), "array". Ranges are C's to check
-- (lw_*_new and lw_runtime_check name the value); this module knows kinds only.
local ffi = require("ffi")
local C = require("lwopt.C")

local options = {}

local INTEGER = { int8_t = true, int16_t = true, int32_t = true, int64_t = true,
   uint8_t = true, uint16_t = true, uint32_t = true, uint64_t = true, int = true,
   size_t = true }
local NUMBER = { float = true, double = true }

local declared -- { enums = set of names, structs = name -> body text }, read on first use

local function read_declarations()
   if declared ~= nil then return declared end
   local text = C.declarations:gsub("/%*.-%*/", " "):gsub("//[^\n]*", " ")
   declared = { enums = {}, structs = {} }
   for name, alias in text:gmatch("typedef%s+enum%s+([%w_]+)%s*%b{}%s*([%w_]+)%s*;") do
      declared.enums[name], declared.enums[alias] = true, true
   end
   for name, body, alias in text:gmatch("typedef%s+struct%s+([%w_]+)%s*(%b{})%s*([%w_]+)%s*;") do
      declared.structs[name], declared.structs[alias] = body, body
   end
   return declared
end

-- The kind of a field of C type `ctype` (as declared: "const float *" is a pointer).
local function kind_of(ctype, pointer, array)
   if pointer then return "pointer" end
   if array then return "array" end
   local base = ctype:gsub("^const%s+", "")
   if NUMBER[base] then return "number" end
   if INTEGER[base] then return "integer" end
   if base == "bool" then return "boolean" end
   local d = read_declarations()
   if d.enums[base] then return "enum", (base:gsub("^lw_", "")) end
   if d.structs[base] then return "struct" end
   return "other"
end

local cache = {}

-- The fields of the option struct `struct` (its C name) in declaration order, `size` left out
-- (set by the struct's defaults function): { name, ctype, kind, enum (the enum's kind for
-- C.names / C.value: "ns_precision" for lw_ns_precision) }. The same list on every call.
function options.fields(struct)
   local list = cache[struct]
   if list ~= nil then return list end
   local body = read_declarations().structs[struct]
   -- an invariant: the modules name structs the header declares
   assert(body, "options.fields: no struct " .. struct .. " in the declarations")
   list = {}
   for decl in body:sub(2, -2):gmatch("[^;]+") do
      local dims = decl:match("(%b[])%s*$")
      local ctype, stars, name = decl:gsub("%b[]%s*$", ""):match("^%s*(.-)%s*(%**)%s*([%w_]+)%s*$")
      if name ~= nil and name ~= "size" then
         local kind, enum = kind_of(ctype, stars ~= "", dims ~= nil)
         -- an invariant: a field read here is one the FFI knows
         assert(ffi.offsetof(struct, name), "options.fields: " .. struct .. "." .. name)
         list[#list + 1] = { name = name, ctype = ctype, kind = kind, enum = enum }
      end
   end
   cache[struct] = list
   return list
end

-- The field of `struct` named `name`, or nil.
function options.field(struct, name)
   for _, f in ipairs(options.fields(struct)) do
      if f.name == name then return f end
   end
end

-- A value as messages show it: 'text' quoted, anything else as tostring says.
function options.shown(v)
   return type(v) == "string" and ("'" .. v .. "'") or tostring(v)
end

-- Whether v is a Lua value of `kind` ("number": finite; "integer": finite and whole;
-- "boolean"); true for the kinds checked elsewhere.
function options.is(kind, v)
   if kind == "boolean" then return type(v) == "boolean" end
   if kind == "number" or kind == "integer" then
      return type(v) == "number" and v == v and math.abs(v) ~= math.huge
         and (kind == "number" or v == math.floor(v))
   end
   return true
end

return options
