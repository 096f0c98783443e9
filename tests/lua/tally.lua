-- tally.lua: pass/fail bookkeeping for the Lua test drivers in tests/lua and tests/, which end
-- with the plain "N passed, M failed" line, and the helpers they share (the shell, a temporary
-- directory, a file's bytes, a log's losses). Load with dofile("tests/lua/tally.lua").
local tally = { passed = 0, failed = 0 }

function tally.expect(ok, what)
   if ok then
      tally.passed = tally.passed + 1
   else
      tally.failed = tally.failed + 1
      io.stderr:write("FAILED: ", what, "\n")
   end
end

-- Prints "<name>: N passed, M failed" and exits non-zero on a failure.
function tally.finish(name)
   print(("%s: %d passed, %d failed"):format(name, tally.passed, tally.failed))
   os.exit(tally.failed == 0 and 0 or 1)
end

-- Runs a shell command; true when it exits 0.
function tally.sh(cmd)
   local ok = os.execute(cmd)
   return ok == 0 or ok == true
end

-- A new empty temporary directory; its path.
function tally.tempdir()
   local dir = os.tmpname()
   os.remove(dir)
   assert(tally.sh("mkdir -p " .. dir), "cannot create " .. dir)
   return dir
end

-- The per-step training losses of a recipe's JSON log, as written (the shortest text that reads
-- back as the same double: exact floats), in the order logged; configuration records (a run's
-- first line, and a resumed run's) are passed over. None when the log cannot be read.
function tally.losses(log)
   local out = {}
   for line in (tally.slurp(log) or ""):gmatch("[^\n]+") do
      local loss = line:match('"loss":([%d%.eE%-]+)')
      if loss and not line:find('"kind":"config"', 1, true) then out[#out + 1] = tonumber(loss) end
   end
   return out
end

-- A file's bytes, or nil when it cannot be read.
function tally.slurp(path)
   local f = io.open(path, "rb")
   if f == nil then return nil end
   local s = f:read("*a")
   f:close()
   return s
end

return tally
