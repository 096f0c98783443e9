-- repl_spec.lua: the interactive session: values print, input continues over lines, errors do
-- not end the session.
local repl = require("lwopt.repl")
local lw = require("lwopt")
local helpers = require("helpers")

local function session(text)
   local path = helpers.tempfile(text)
   local input = assert(io.open(path))
   local out = helpers.sink()
   local status = repl.run{ lw = lw, input = input, output = out }
   input:close()
   os.remove(path)
   return status, out.text()
end

describe("lw repl", function()
   it("prints the values of expressions, strings as they are", function()
      local status, out = session("1 + 2\n'a\\nb'\n")
      assert.equal(0, status)
      assert.matches("lw> 3\nlw> a\nb\n", out, 1, true)
   end)

   it("continues incomplete input on the next line", function()
      local _, out = session("function sq(x)\nreturn x * x\nend\nsq(7)\n")
      assert.matches("lw> >> >> lw> 49\n", out, 1, true)
   end)

   it("reports errors and goes on", function()
      local _, out = session("error('boom')\n1 +\n* 2\n40 + 2\n")
      assert.matches("boom", out, 1, true)
      assert.matches("unexpected symbol", out, 1, true)
      assert.matches("42\n", out, 1, true)
   end)

   it("keeps variables between lines and has lw loaded", function()
      local _, out = session("l = lw.layout.compute(lw.arch.gpt{n_layer=1, n_embd=64, n_head=2},"
         .. " {dp = 2})\nl:show()\n")
      assert.matches("buffer 2  muon", out, 1, true)
   end)

   it("shows tables briefly", function()
      assert.equal("{ 1, 2, a = \"x\" }", repl.inspect({ 1, 2, a = "x" }))
   end)
end)
