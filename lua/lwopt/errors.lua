-- errors.lua: the one way lwopt's Lua modules raise an error: the message "where: what went
-- wrong" raised at level 0, since it already says where (no file:line added); a program's misuse
-- of a function with the position of the line that called it; a message made elsewhere raised
-- again. C.check turns a failed C status into a message and raises it here. Internal invariants
-- are asserts that say so where they stand.
local errors = {}

local function message_of(where, fmt, ...)
   local message = fmt:format(...)
   if where ~= nil then message = where .. ": " .. message end
   return message
end

-- Raises "where: " .. fmt:format(...) at level 0; where nil: the message alone.
function errors.fail(where, fmt, ...)
   error(message_of(where, fmt, ...), 0)
end

-- fail(fmt, ...) for one place: errors.fail(where, fmt, ...).
function errors.failer(where)
   return function(fmt, ...) errors.fail(where, fmt, ...) end
end

-- Raises "where: " .. fmt:format(...) with the position of the line that called the function
-- calling misuse (as error(message, 2) there would): a wrong argument is the caller's line to
-- fix. comm.run prints such an error with its traceback. Called directly, not as a tail call,
-- since the position is counted in stack frames.
function errors.misuse(where, fmt, ...)
   error(message_of(where, fmt, ...), 3)
end

-- Raises message (any value) as it is, at level 0: an error caught and raised again after
-- cleaning up, or a message another function composed.
function errors.raise(message)
   error(message, 0)
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
