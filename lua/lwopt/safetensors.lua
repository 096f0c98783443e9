-- safetensors.lua: writes f32 tensors by name as a safetensors file through lwopt's C writer
-- (src/core/safetensors.c: 8-byte header length, JSON header, 8-byte aligned data, fsync), and
-- opens one to read its tensors by name.
local ffi = require("ffi")
local C = require("lwopt.C")

local lib = C.lib
local safetensors = {}

-- tensors: list of { name, data = float*, shape = {...} | count = n }; metadata: optional list
-- of { key, value } string pairs. Returns the file's size and CRC32C.
function safetensors.write(path, tensors, metadata)
   metadata = metadata or {}
   local views = ffi.new("lw_tensor_view[?]", math.max(#tensors, 1))
   for i, t in ipairs(tensors) do
      local v = views[i - 1]
      v.name = t.name -- the Lua strings stay alive in `tensors` during the call
      v.dtype = "F32"
      local shape = t.shape or { t.count }
      v.ndim = #shape
      local numel = 1
      for d, size in ipairs(shape) do
         v.shape[d - 1] = size
         numel = numel * size
      end
      v.data = t.data
      v.bytes = 4 * numel
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

-- Tensor `name` of an open file as an lw_tensor_view (data points into the file), or nil.
function safetensors.find(st, name)
   local i = ffi.new("int32_t[1]")
   if lib.lw_safetensors_find(st, name, i) ~= 0 then return nil end
   local view = ffi.new("lw_tensor_view")
   C.check(lib.lw_safetensors_tensor(st, i[0], view), "safetensors.find")
   return view
end

return safetensors
