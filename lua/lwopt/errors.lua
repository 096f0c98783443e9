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

return errors
