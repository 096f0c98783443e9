-- safetensors.lua: writes f32 tensors by name as a safetensors file through lwopt's C writer
-- (src/core/safetensors.c: 8-byte header length, JSON header, 8-byte aligned data, fsync), and
-- opens one to read its tensors by name.
local ffi = require("ffi")
local C = require("lwopt.C")
local errors = require("lwopt.errors")

local lib = C.lib
local safetensors = {}

-- Bytes per element of the dtypes lwopt writes.
local SIZES = { F32 = 4, BF16 = 2, F16 = 2, I32 = 4 }

-- tensors: list of { name, data = float*, shape = {...} | count = n, dtype = "F32" (default) |
-- "BF16" | "F16" (data then holds 2-byte elements) | "I32" }; metadata: optional list of
-- { key, value } string pairs. Returns the file's size and CRC32C.
function safetensors.write(path, tensors, metadata)
   metadata = metadata or {}
   local views = ffi.new("lw_tensor_view[?]", math.max(#tensors, 1))
   for i, t in ipairs(tensors) do
      local v = views[i - 1]
      v.name = t.name -- the Lua strings stay alive in `tensors` during the call
      v.dtype = t.dtype or "F32"
      local shape = t.shape or { t.count }
      v.ndim = #shape
      local numel = 1
      for d, size in ipairs(shape) do
         v.shape[d - 1] = size
         numel = numel * size
      end
      v.data = t.data
      local size = SIZES[t.dtype or "F32"]
      if size == nil then errors.misuse("safetensors.write", "unknown dtype") end
      v.bytes = size * numel
   end
   local keys = ffi.new("const char*[?]", math.max(#metadata, 1))
   local values = ffi.new("const char*[?]", math.max(#metadata, 1))
   for i, kv in ipairs(metadata) do
      keys[i - 1] = kv[1]
      values[i - 1] = kv[2]
   end
   local bytes, crc = ffi.new("int64_t[1]"), ffi.new("uint32_t[1]")
   C.check(lib.lw_safetensors_write(path, views, #tensors, keys, values, #metadata, bytes, crc),
      "safetensors.write")
   return tonumber(bytes[0]), tonumber(crc[0])
end

-- The file at path, open (mapped) until collected; errors name where it was wanted.
function safetensors.open(path, where)
   local out = ffi.new("lw_safetensors*[1]")
   C.check(lib.lw_safetensors_open(path, out), where or "safetensors.open")
   return ffi.gc(out[0], lib.lw_safetensors_free)
end

-- The value of `key` in an open file's __metadata__, or nil.
function safetensors.metadata(st, key)
   local value = lib.lw_safetensors_metadata(st, key)
   if value == nil then return nil end
   return ffi.string(value)
end

-- The names of an open file's tensors, in the file's order.
function safetensors.names(st)
   local out, view = {}, ffi.new("lw_tensor_view")
   for i = 0, lib.lw_safetensors_count(st) - 1 do
      C.check(lib.lw_safetensors_tensor(st, i, view), "safetensors.names")
      out[#out + 1] = ffi.string(view.name)
   end
   return out
end

-- Tensor `name` of an open file as an lw_tensor_view (data points into the file), or nil.
function safetensors.find(st, name)
   local i = ffi.new("int32_t[1]")
   if lib.lw_safetensors_find(st, name, i) ~= 0 then return nil end
   local view = ffi.new("lw_tensor_view")
   C.check(lib.lw_safetensors_tensor(st, i[0], view), "safetensors.find")
   return view
end

return safetensors
