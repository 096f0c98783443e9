-- logs/writer.lua: the JSON-lines log lw.train writes (--log): a new file, or for a resumed run
-- the old one appended to; each run's configuration record first (when it has one), then a
-- record per step. Each record is one unbuffered write, checked; when it fails (a full disk, a
-- file-size limit) the file is cut back to its last whole record, so that readers and a
-- resumed run that appends find whole lines only, and the failure is returned, naming the file
-- and the reason. Readers: lwopt.logs (init.lua).
local json = require("lwopt.json")
local files = require("lwopt.files")
local errors = require("lwopt.errors")

local writer = {}

local Log = {}
Log.__index = Log

-- Opens the log at path (append: keep what is there and write after it). Errors name the path.
function writer.open(path, append)
   local file, err = io.open(path, append and "ab" or "wb")
   if file == nil then errors.fail("train", "cannot write the log: %s", tostring(err)) end
   -- unbuffered: a record reaches the file (or fails) when written, never later at close
   file:setvbuf("no")
   local bytes = append and file:seek("end") or 0
   return setmetatable({ path = path, file = file, bytes = bytes }, Log)
end

-- Appends rec (a step record, or the run's configuration record: kind "config") as one line.
-- Returns nil, or why it could not be written; after a failure the log takes no more records
-- (each returns the same reason). The records it could not take are kept in self.unwritten, in
-- order, for a checkpoint to carry to the run that resumes it (train.lua), so that the log
-- misses no step.
function Log:write(rec)
   if self.failed then
      self.unwritten[#self.unwritten + 1] = rec
      return self.failed
   end
   local line = json.encode(json.object(rec)) .. "\n"
   local ok, err = self.file:write(line)
   if ok then
      self.bytes = self.bytes + #line
      return nil
   end
   self.unwritten = { rec }
   local cut = pcall(files.truncate, self.path, self.bytes)
   local what = rec.kind == "config" and "the configuration record"
      or ("the record of step %d"):format(rec.step)
   self.failed = ("cannot write %s to %s (%s)%s"):format(what, self.path, tostring(err),
      cut and "; the records before it are whole" or "")
   return self.failed
end

function Log:close()
   if self.file then self.file:close() end
   self.file = nil
end

return writer
