-- publish_spec.lua: a directory replaced whole (lua/lwopt/publish.lua): created when missing,
-- exchanged when there, its other files and links carried over, untouched when the writing
-- fails; two renames where the file system cannot exchange, and the old directory that a kill
-- between them left aside put back; what it refuses. `lwopt export` through it: export_spec.lua.
local publish = require("lwopt.publish")
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")

local function put(path, text)
   local f = assert(io.open(path, "wb"))
   f:write(text)
   f:close()
end

-- A write function for publish.dir that puts files { name = text } into the staging directory.
local function writing(contents)
   return function(stage)
      for name, text in pairs(contents) do put(stage .. "/" .. name, text) end
   end
end

local function error_of(fn, ...)
   local ok, err = pcall(fn, ...)
   assert.is_false(ok)
   return tostring(err)
end

describe("publish.dir", function()
   local dir
   before_each(function() dir = helpers.tempdir() end)
   after_each(function() helpers.sh("rm -rf " .. dir) end)

   it("creates a missing directory, its parents too, holding what write wrote", function()
      publish.dir(dir .. "/a/b/out", writing({ x = "1", y = "2" }))
      assert.same({ "x", "y" }, helpers.lines_of("ls -A " .. dir .. "/a/b/out"))
      assert.equal("1", helpers.slurp(dir .. "/a/b/out/x"))
      assert.same({ "out" }, helpers.lines_of("ls -A " .. dir .. "/a/b"))
   end)

   it("replaces a directory whole, carrying its other files and links over", function()
      local out = dir .. "/out"
      publish.dir(out, writing({ x = "old x", y = "old y" }))
      put(out .. "/mine", "the user's")
      assert.equal(0, select(2, helpers.sh("ln -s mine " .. out .. "/link")))
      local inode = helpers.lines_of("stat -c %i " .. out .. "/mine")[1]
      publish.dir(out, writing({ x = "new x", y = "new y" }))
      assert.same({ "link", "mine", "x", "y" }, helpers.lines_of("ls -A " .. out))
      assert.same({ "new x", "new y" }, { helpers.slurp(out .. "/x"), helpers.slurp(out .. "/y") })
      -- the same file (a hard link), not a copy; the link as it was
      assert.equal(inode, helpers.lines_of("stat -c %i " .. out .. "/mine")[1])
      assert.same({ "mine" }, helpers.lines_of("readlink " .. out .. "/link"))
      assert.same({ "out" }, helpers.lines_of("ls -A " .. dir))
   end)

   it("leaves the directory as it was when write fails, its staging directory removed",
      function()
      local out = dir .. "/out"
      publish.dir(out, writing({ x = "old x", y = "old y" }))
      local err = error_of(publish.dir, out, function(stage)
         put(stage .. "/x", "new x")
         error("no space left on device", 0)
      end)
      assert.equal("no space left on device", err)
      assert.same({ "x", "y" }, helpers.lines_of("ls -A " .. out))
      assert.same({ "old x", "old y" }, { helpers.slurp(out .. "/x"), helpers.slurp(out .. "/y") })
      assert.same({ "out" }, helpers.lines_of("ls -A " .. dir))
   end)

   it("renames twice where the file system cannot exchange, and puts back what a kill left",
      function()
      local out = dir .. "/out"
      publish.dir(out, writing({ x = "old x" }))
      put(out .. "/mine", "the user's")
      local exchange = publish.exchange
      publish.exchange = function() return false end
      local ok, err = pcall(publish.dir, out, writing({ x = "new x" }))
      publish.exchange = exchange
      assert.is_true(ok, err)
      assert.same({ "new x", "the user's" }, { helpers.slurp(out .. "/x"), helpers.slurp(out .. "/mine") })
      assert.same({ "out" }, helpers.lines_of("ls -A " .. dir))
      -- a kill between the two renames: the old directory whole, aside, and no out
      assert.equal(0, select(2, helpers.sh(("mv %s/out %s/.out.lwopt-old"):format(dir, dir))))
      publish.dir(out, writing({ x = "newer x" }))
      assert.same({ "newer x", "the user's" }, { helpers.slurp(out .. "/x"), helpers.slurp(out .. "/mine") })
      assert.same({ "out" }, helpers.lines_of("ls -A " .. dir))
   end)

   it("refuses before writing: a file, a directory inside, the current directory", function()
      local out = dir .. "/out"
      put(dir .. "/file", "")
      local wrote = false
      local function write() wrote = true end
      assert.equal(dir .. "/file exists and is not a directory",
         error_of(publish.dir, dir .. "/file", write))
      assert.equal(0, select(2, helpers.sh("mkdir -p " .. out .. "/sub")))
      assert.equal(out .. " holds the directory 'sub': it is replaced whole and only its files "
         .. "are carried over; move 'sub' out or choose another directory",
         error_of(publish.dir, out, write))
      assert.equal("/ is the root directory, which cannot be replaced",
         error_of(publish.dir, "/", write))
      assert.is_false(wrote)
      -- run from inside it: the process and its shell would be left in a removed directory
      for _, at in ipairs({ out, out .. "/sub" }) do
         local said = helpers.sh(("cd %s && luajit -e \"package.path = '%s/lua/?.lua;%s/build/"
            .. "lua/?.lua;' .. package.path; io.write(select(2, pcall(require('lwopt.publish')"
            .. ".dir, '%s', function() end)))\""):format(at, root, root, out))
         assert.equal(out .. " is the current directory or holds it: it is replaced whole, "
            .. "which would leave this process and its shell in a removed directory; run from "
            .. "elsewhere", said)
      end
   end)
end)
