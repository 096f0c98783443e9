-- repl_spec.lua: the interactive session: values print, input continues over lines, errors do
-- not end the session, `help` says what there is, `quit` ends it, names complete; bin/lwopt repl
-- with commands piped in. (spec/repl_input_spec.lua: readline on a terminal, the history file.)
local repl = require("lwopt.app.repl")
local lw = require("lwopt")
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")

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

   it("prints help as a word or a call, and ends at quit, exit or quit()", function()
      for _, word in ipairs({ "quit", "exit", "  quit()  ", "exit()" }) do
         local status, out = session("help\nhelp()\n1 + 1\n" .. word .. "\n2 + 40\n")
         assert.equal(0, status)
         local _, times = out:gsub("Modules %(lw%.<name>", "")
         assert.equal(2, times)
         assert.matches("lw> 2\nlw> $", out)
         assert.is_nil(out:find("42", 1, true))
      end
   end)

   it("takes help and quit as variables inside an expression", function()
      local _, out = session("help = 3\nhelp + 1\nquit2 = 5\nquit2\n")
      assert.matches("lw> 4\n", out, 1, true)
      assert.matches("lw> 5\n", out, 1, true)
   end)

   it("lists in help every module of lw, with calls that exist, and how to show a layout",
      function()
      local listed = {}
      for _, m in ipairs(repl.MODULES) do
         listed[m[1]] = true
         local module = lw[m[1]]
         assert.is_table(module, m[1])
         -- "compute(specs, ...)", "GPT.new(cfg)", "lw.route(...)": each name called exists
         for call in m[3]:gmatch("([%w_.]+)%(") do
            local f = call:match("^lw%.") and lw or module
            for part in call:gsub("^lw%.", ""):gmatch("[^.]+") do f = f[part] end
            local mt = type(f) == "table" and getmetatable(f)
            assert.is_true(type(f) == "function" or (mt and mt.__call ~= nil) or false,
               m[1] .. ": " .. call)
         end
      end
      for name, value in pairs(lw) do
         if type(value) == "table" then
            assert.is_true(listed[name], "lw." .. name .. " is missing from repl.MODULES")
         end
      end
      local text = repl.help_text(lw)
      assert.matches("l:show()", text, 1, true)
      assert.matches("lw.layout.compute(lw.arch.gpt{", text, 1, true)
      assert.matches("quit, exit, Ctrl-D", text, 1, true)
      for line in text:gmatch("[^\n]+") do assert.is_true(#line <= 100, line) end
   end)

   it("completes names: globals, a module's fields, an object's methods", function()
      local env = setmetatable({ lw = lw, l = lw.layout.compute(lw.arch.gpt{ n_layer = 1,
         n_embd = 64, n_head = 2 }, { dp = 2 }) }, { __index = _G })
      assert.same({ "lw.layout." }, repl.complete(env, "lw.lay"))
      assert.same({ "lw.layout.compute(" }, repl.complete(env, "lw.layout.comp"))
      assert.same({ "l:shard(", "l:show(" }, repl.complete(env, "l:sh"))
      assert.same({ "print(" }, repl.complete(env, "prin"))
      assert.same({}, repl.complete(env, "nothing.here"))
      assert.same({}, repl.complete(env, "lw.version.x"))
   end)

   it("runs commands piped into bin/lwopt repl, and saves no history from a pipe", function()
      local hist = helpers.fresh_path()
      local out, status = helpers.sh("cd /tmp && printf 'x = 6 * 7\\nx\\nhelp\\nquit\\n' | "
         .. "LWOPT_HISTORY=" .. hist .. " " .. root .. "/bin/lwopt repl")
      assert.equal(0, status, out)
      assert.matches("lw> lw> 42\n", out, 1, true)
      assert.matches("layout      which buffer", out, 1, true)
      assert.is_nil(io.open(hist))
   end)
end)
