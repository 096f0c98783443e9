-- recipe_log_spec.lua: the pieces of the configuration record that opens a recipe's --log
-- (lua/lwopt/app/recipe_log.lua): the host, lwopt's commit, the start time, the ranks' devices.
-- The whole record, from a run, is checked in recipe_spec.lua.
local recipe_log = require("lwopt.app.recipe_log")
local lw = require("lwopt")
local helpers = require("helpers")

describe("lwopt.recipe_log", function()
   it("names this machine as the kernel does", function()
      local name = helpers.sh("cat /proc/sys/kernel/hostname"):gsub("%s+$", "")
      assert.equal(name, recipe_log.host_name())
   end)

   it("finds the commit of the checkout it was loaded from", function()
      local head, status = helpers.sh("git rev-parse HEAD 2>/dev/null")
      if status ~= 0 then return pending("this tree is not a git checkout") end
      assert.equal((head:gsub("%s+$", "")), recipe_log.commit())
   end)

   it("has no commit, and no error, where git is missing", function()
      local out, status = helpers.sh("PATH=/nonexistent /usr/bin/luajit -e \"package.path = "
         .. "'lua/?.lua;lua/?/init.lua;build/lua/?.lua;' .. package.path; "
         .. "print(require('lwopt.app.recipe_log').commit())\"")
      assert.equal(0, status, out)
      assert.equal("nil\n", out)
   end)

   it("writes the start time in ISO 8601, UTC, to the millisecond", function()
      assert.equal("1970-01-01T00:00:00.000Z", recipe_log.iso_time(0))
      assert.equal("2025-01-31T09:05:07.250Z", recipe_log.iso_time(1738314307.25))
      assert.equal("2025-01-31T09:05:07.999Z", recipe_log.iso_time(1738314307.9999))
   end)

   it("gathers every rank's host and device on rank 0", function()
      local comm = lw.comm.self()
      local devices = recipe_log.devices(comm, lw.ddp.device("cpu"))
      assert.same({ { rank = 0, host = recipe_log.host_name(), device = "cpu",
         name = lw.device_info("cpu").name } }, devices)
   end)
end)
