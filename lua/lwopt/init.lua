-- lwopt: the Lua front end. require("lwopt") gives the arch, route and layout modules and the
-- library's version and features; see DESIGN.md for the contract.
local C = require("lwopt.C")
local ffi = require("ffi")

local lw = {
   arch = require("lwopt.arch"),
   route = require("lwopt.route"),
   layout = require("lwopt.layout"),
   json = require("lwopt.json"),
   version = ffi.string(C.lib.lw_version()),
   library = C.path,
}

function lw.has_cuda()
   return C.lib.lw_has_cuda()
end

return lw
