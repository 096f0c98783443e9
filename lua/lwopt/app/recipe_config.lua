-- recipe_config.lua: --config FILE of recipes/gpt_small.lua (beside recipe_flags.lua): a Lua
-- file that returns a table of flag values, or a --log whose configuration record (recipe_log)
-- is read back, made into the flags it stands for, which go before the command line's so that
-- the flags given override it. Every key must be a flag; each value is checked as the flag's.
local flags = require("lwopt.flags")
local json = require("lwopt.json")
local errors = require("lwopt.errors")

local recipe_config = {}

-- What a log's record holds of the run that wrote it rather than of its configuration: its
-- outputs, checkpoints, resume and stop, the config it read, and --accum (the recorded global
-- batch keeps the step's sequences at any rank count; --accum follows from it).
local NOT_FROM_LOG = { log = true, save_params = true, ckpt_dir = true, ckpt_every = true,
   keep = true, keep_best = true, resume = true, overwrite = true, reschedule = true,
   stop_after = true, config = true, help = true, accum = true }

local function fail(path, fmt, ...)
   errors.raise(("--config %s: "):format(path) .. fmt:format(...))
end

-- The flag of a key ("n_layer" or "n-layer"), or nil and the "did you mean" of a near one, in
-- the key's own spelling.
local function flag_of(key, by_name, list)
   local name = key:gsub("_", "-")
   if by_name[name] then return by_name[name] end
   local _, message = flags.parse({ "--" .. name }, list)
   local near = tostring(message):match("did you mean %-%-([%w%-]+)")
   if near and key:find("_") then near = near:gsub("%-", "_") end
   return nil, near and (" (did you mean %s?)"):format(near) or ""
end

-- The command-line words of one key's value: {} for a value that sets nothing (false for an
-- on/off-less switch, a log's null).
local function words(f, value, path, key)
   local dashed = "--" .. f[1]
   if value == json.null then return {} end
   if f.many and type(value) == "table" then -- a flag given again (--models a --models b)
      local out = {}
      for _, one in ipairs(value) do
         for _, w in ipairs(words(f, one, path, key)) do out[#out + 1] = w end
      end
      return out
   end
   if f[2] == "bool" then
      if type(value) ~= "boolean" then
         fail(path, "%s must be true or false, got %s", key, tostring(value))
      end
      return value and { dashed } or {}
   end
   local text
   if type(value) == "boolean" and type(f[2]) == "table" and (f[2][1] == "on"
      or f[2][1] == "off") then
      text = value and "on" or "off"
   elseif type(value) == "number" then
      text = (value == math.floor(value) and math.abs(value) < 2 ^ 53) and ("%d"):format(value)
         or ("%.17g"):format(value)
   elseif type(value) == "string" then
      text = value
   elseif type(value) == "table" and #value > 0 then -- a list of ids (--prompt-ids)
      local parts = {}
      for i, x in ipairs(value) do parts[i] = tostring(x) end
      text = table.concat(parts, ",")
   else
      fail(path, "%s cannot be %s", key, type(value))
   end
   local parsed, err = flags.parse({ dashed, text }, { f })
   if parsed == nil then fail(path, "%s", err) end
   return { dashed, text }
end

-- The flags of a table of values (t, from path), in the list's order.
local function to_args(t, path, list)
   local by_name, seen, values = {}, {}, {}
   for _, f in ipairs(list) do by_name[f[1]] = f end
   for key, value in pairs(t) do
      if type(key) ~= "string" then
         fail(path, "keys must be flag names, got %s", tostring(key))
      end
      local f, near = flag_of(key, by_name, list)
      if f == nil then fail(path, "unknown key '%s'%s", key, near) end
      if f[1] == "config" then fail(path, "a config cannot name another (config = ...)") end
      if seen[f[1]] then fail(path, "%s is given twice (as %s and %s)", f[1], seen[f[1]], key) end
      seen[f[1]], values[f[1]] = key, value
   end
   local args = {}
   for _, f in ipairs(list) do
      if values[f[1]] ~= nil then
         for _, w in ipairs(words(f, values[f[1]], path, seen[f[1]])) do args[#args + 1] = w end
      end
   end
   return args
end

-- The first configuration record's flags of a log at path (its first lines), without what
-- belongs to the run that wrote it (NOT_FROM_LOG, and the defaults the record resolves that a
-- check would refuse if given: the prompt's ids beside its text, Muon's TP mode without --tp).
local function from_log(path)
   for line in io.lines(path) do
      local ok, rec = pcall(json.decode, line)
      if not ok then fail(path, "not a Lua file, nor a log whose lines are JSON: %s", rec) end
      if type(rec) == "table" and rec.kind == "config" then
         if type(rec.flags) ~= "table" then fail(path, "its configuration record has no flags") end
         local out = {}
         for key, value in pairs(rec.flags) do
            if not NOT_FROM_LOG[key:gsub("-", "_")] then out[key] = value end
         end
         if type(out.prompt) == "string" then out["prompt-ids"] = nil end
         if out.tp == 1 then out["muon-tp-mode"] = nil end
         return out
      end
   end
   fail(path, "the log holds no configuration record (kind \"config\")")
end

-- A Lua config: the table the file returns, run with no globals but math.
local function from_lua(path)
   local chunk, err = loadfile(path)
   if chunk == nil then fail(path, "%s", err) end
   setfenv(chunk, { math = math })
   local ok, t = pcall(chunk)
   if not ok then fail(path, "%s", tostring(t)) end
   if type(t) ~= "table" then
      fail(path, "must return a table of flag values ({ n_layer = 4, lr = 1e-3 }), returned %s",
         type(t))
   end
   return t
end

-- The flags (a list of command-line words) the config at path stands for, against the flag
-- list; raises one line naming the file and the key at fault.
function recipe_config.args(path, list)
   local f, err = io.open(path, "rb")
   if f == nil then errors.raise(("--config %s cannot be read: %s"):format(path, err)) end
   local head = f:read(4096) or ""
   f:close()
   local t = head:match("^%s*{") and from_log(path) or from_lua(path)
   return to_args(t, path, list)
end

return recipe_config
