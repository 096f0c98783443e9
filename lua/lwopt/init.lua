-- lwopt: the Lua front end. require("lwopt") gives the modules (arch, route, layout, comm,
-- tensor, ddp, optim, json) and the library's version and features; see DESIGN.md.
local C = require("lwopt.C")
local ffi = require("ffi")

local lw = {
   arch = require("lwopt.arch"),
   route = require("lwopt.route"),
   layout = require("lwopt.layout"),
   comm = require("lwopt.comm"),
   tensor = require("lwopt.tensor"),
   ddp = require("lwopt.ddp"),
   optim = require("lwopt.optim"),
   nn = require("lwopt.nn"),
   data = require("lwopt.data"),
   train = require("lwopt.train"),
   checkpoint = require("lwopt.checkpoint"),
   json = require("lwopt.json"),
   version = ffi.string(C.lib.lw_version()),
   library = C.path,
}

function lw.has_cuda()
   return C.lib.lw_has_cuda()
end

-- Seconds on a monotonic clock.
function lw.now()
   return C.lib.lw_now()
end

return lw
