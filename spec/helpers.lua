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

return helpers
