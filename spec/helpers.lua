-- helpers.lua: shared by the specs: an output sink that collects writes, and running a shell
-- command from the repo root.
local helpers = {}

-- An object with :write and :flush, like a file, whose text is helpers.text(sink).
function helpers.sink()
   local parts = {}
   return {
      parts = parts,
      write = function(self, ...)
         for _, s in ipairs({ ... }) do parts[#parts + 1] = tostring(s) end
         return self
      end,
      flush = function() end,
      text = function() return table.concat(parts) end,
   }
end

-- Runs a shell command; returns its stdout+stderr and exit status.
function helpers.sh(command)
   local pipe = io.popen("(" .. command .. ") 2>&1; echo \"__status=$?\"")
   local out = pipe:read("*a")
   pipe:close()
   local status = tonumber(out:match("__status=(%d+)%s*$"))
   return out:gsub("__status=%d+%s*$", ""), status
end

-- A temporary file holding text; returns its path.
function helpers.tempfile(text)
   local path = os.tmpname()
   local f = assert(io.open(path, "w"))
   f:write(text)
   f:close()
   return path
end

-- Reads one tensor of a safetensors file with Debian's python3 and numpy, parsing the header
-- itself (an independent reader). Returns { shape = {...}, first, last } or fails the spec.
function helpers.read_safetensors(path, name)
   local script = helpers.tempfile([==[
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
t = header[sys.argv[2]]
assert t["dtype"] == "F32"
a, b = t["data_offsets"]
x = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).reshape(t["shape"])
assert np.isfinite(x).all()
print(len(header), " ".join(str(d) for d in x.shape), repr(float(x.flat[0])), repr(float(x.flat[-1])))
]==])
   local out, status = helpers.sh("/usr/bin/python3 " .. script .. " " .. path .. " '" .. name .. "'")
   os.remove(script)
   assert(status == 0, out)
   local count, dims, first, last = out:match("^(%d+) ([%d ]+) (%S+) (%S+)")
   local shape = {}
   for d in dims:gmatch("%d+") do shape[#shape + 1] = tonumber(d) end
   return { entries = tonumber(count), shape = shape, first = tonumber(first), last = tonumber(last) }
end

return helpers
