-- errors.lua: the one way lwopt's Lua modules raise an error that names its place: the message
-- "where: what went wrong" raised at level 0, since it already says where (no file:line added).
-- Status codes from C are C.check's, not this module's.
local errors = {}

-- Raises "where: " .. fmt:format(...) at level 0; where nil: the message alone.
function errors.fail(where, fmt, ...)
   local message = fmt:format(...)
   if where ~= nil then message = where .. ": " .. message end
   error(message, 0)
end

-- fail(fmt, ...) for one place: errors.fail(where, fmt, ...).
function errors.failer(where)
   return function(fmt, ...) errors.fail(where, fmt, ...) end
end

-- The places lwopt's lower layers name before their messages: the C library's objects
-- ("files: ", "json: ") and the Lua functions that raised them ("files.kind: ",
-- "checkpoint.load: "). A developer reads them; a command's user reads the command's name once.
local INTERNAL = { checkpoint = true, files = true, json = true, safetensors = true,
   weights = true, names = true, token_shards = true, tokens = true, signals = true }

-- message with the internal places it carries taken out: at its start, after "(" and after
-- another ": " ("x.json: json.decode: json: bad" -> "x.json: bad"); the same word elsewhere
-- ("a checkpoint: ...", "/data/files: ...") is the message's own and stays.
function errors.plain(message)
   local out, at = {}, 1
   while true do
      local s, e, name = message:find("([%a_]+)[%w_%.]*: ", at)
      if s == nil then break end
      local before = message:sub(math.max(1, s - 2), s - 1)
      local placed = s == 1 or before:sub(-1) == "(" or before == ": "
      -- a match that starts inside a word ("myfiles: ") is looked at again from its next byte
      if placed and INTERNAL[name] and message:sub(s, e):match("^[%a_]+[%w_]*%.?[%w_]*: $") then
         out[#out + 1] = message:sub(at, s - 1)
         at = e + 1
      else
         out[#out + 1] = message:sub(at, s)
         at = s + 1
      end
   end
   out[#out + 1] = message:sub(at)
   return table.concat(out)
end

return errors
