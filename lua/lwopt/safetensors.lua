-- safetensors.lua: writes f32 tensors by name in the safetensors format (8-byte little-endian
-- header length, a JSON header { name: { dtype, shape, data_offsets } }, then the raw data),
-- readable by any safetensors reader.
local ffi = require("ffi")
local json = require("lwopt.json")

local safetensors = {}

local function u64_le(n)
   local bytes = {}
   for i = 1, 8 do
      bytes[i] = string.char(n % 256)
      n = math.floor(n / 256)
   end
   return table.concat(bytes)
end

-- tensors: list of { name, shape, data = float* }. Writes to path.tmp, then renames.
function safetensors.write(path, tensors)
   local header, at = json.object({}), 0
   for _, t in ipairs(tensors) do
      local numel = 1
      for _, d in ipairs(t.shape) do numel = numel * d end
      header[t.name] = json.object({ dtype = "F32", shape = json.array(t.shape),
                                     data_offsets = json.array({ at, at + 4 * numel }) })
      t.bytes = 4 * numel
      at = at + t.bytes
   end
   local text = json.encode(header)
   text = text .. string.rep(" ", (8 - #text % 8) % 8) -- data starts 8-byte aligned
   local tmp = path .. ".tmp"
   local f, err = io.open(tmp, "wb")
   if f == nil then error("safetensors: cannot write '" .. path .. "': " .. tostring(err), 0) end
   f:write(u64_le(#text), text)
   for _, t in ipairs(tensors) do f:write(ffi.string(t.data, t.bytes)) end
   f:close()
   assert(os.rename(tmp, path))
end

return safetensors
