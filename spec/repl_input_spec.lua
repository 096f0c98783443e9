-- repl_input_spec.lua: where the REPL's lines come from: the history file's place, plain reads
-- from a file, and bin/lwopt repl on a pseudo-terminal (script(1)) with readline: a line
-- recalled with Up, the history written as lines are entered and read by the next session, and
-- a history file that cannot be written leaving the session working.
local repl_input = require("lwopt.app.repl_input")
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")

-- The lines a terminal shows for text: a backspace moves the cursor left, a carriage return to
-- the line's start, and what follows writes over what was there (readline redraws so).
local function screen(text)
   local lines, line, col = {}, {}, 0
   for c in text:gsub("\27%[%?2004[hl]", ""):gmatch(".") do
      if c == "\n" then
         lines[#lines + 1] = table.concat(line)
         line, col = {}, 0
      elseif c == "\r" then
         col = 0
      elseif c == "\b" then
         col = math.max(0, col - 1)
      else
         col = col + 1
         line[col] = c
      end
   end
   lines[#lines + 1] = table.concat(line)
   return table.concat(lines, "\n")
end

-- bin/lwopt repl on a pseudo-terminal, typing `keys`; returns what the terminal shows at the end
-- (screen) and the exit status.
local function on_terminal(keys, env)
   local out, status = helpers.sh(("cd /tmp && printf '%s' | %s script -qec '%s/bin/lwopt repl' "
      .. "/dev/null"):format(keys, env, root))
   return screen(out), status
end

local function terminal_pending()
   if select(2, helpers.sh("command -v script")) ~= 0 then
      return "script(1) (util-linux) is not installed"
   end
   if select(2, helpers.sh("luajit -e 'require(\"readline\")'")) ~= 0 then
      return "lua-readline is not installed (scripts/deps.sh installs it)"
   end
   return nil
end

describe("repl input", function()
   it("keeps the history in LWOPT_HISTORY, XDG_STATE_HOME or HOME, in that order", function()
      local function path(vars) return repl_input.history_path(function(k) return vars[k] end) end
      assert.equal("/h/.lwopt_history", path({ HOME = "/h" }))
      assert.equal("/s/lwopt/history", path({ HOME = "/h", XDG_STATE_HOME = "/s" }))
      assert.equal("/x", path({ HOME = "/h", XDG_STATE_HOME = "/s", LWOPT_HISTORY = "/x" }))
      assert.is_nil(path({ HOME = "/h", LWOPT_HISTORY = "" }))
      assert.is_nil(path({}))
   end)

   it("reads a file plainly, writing the prompt, whatever the history", function()
      local file = helpers.tempfile("a\nb\n")
      local i, out = assert(io.open(file)), helpers.sink()
      local reader = repl_input.open{ input = i, output = out, history = "/nonexistent/h" }
      assert.equal("plain", reader.kind)
      assert.equal("a", reader:read("p> "))
      assert.equal("b", reader:read("q> "))
      assert.is_nil(reader:read("r> "))
      assert.equal("p> q> r> ", out.text())
      i:close()
      os.remove(file)
   end)

   it("on a terminal, recalls lines with Up and keeps them for the next session", function()
      local why = terminal_pending()
      if why then return pending(why) end
      local dir = os.tmpname()
      os.remove(dir)
      local hist = dir .. "/state/lwopt/history"
      local env = "XDG_STATE_HOME=" .. dir .. "/state HOME=" .. dir
      -- Up recalls 40+2 and Enter runs it again; a line edited with Backspace
      local out, status = on_terminal("40+2\\n\\033[A\\n6*8\\1777\\n\\004", env)
      assert.equal(0, status, out)
      local _, n = out:gsub("lw> 40%+2\n42\n", "")
      assert.equal(2, n, out)
      assert.matches("lw> 6*7\n42\n", out, 1, true)
      local f = assert(io.open(hist), "no history file at " .. hist)
      assert.equal("40+2\n6*7\n", f:read("*a"))
      f:close()
      -- the next session starts with that history: Up Up is 40+2
      out = on_terminal("\\033[A\\033[A\\n\\004", env)
      assert.matches("lw> 40+2\n42\n", out, 1, true)
      assert.equal(0, select(2, helpers.sh("rm -rf " .. dir)))
   end)

   it("on a terminal, says once that the history cannot be written and goes on", function()
      local why = terminal_pending()
      if why then return pending(why) end
      local file = helpers.tempfile("") -- a file, so nothing can be created below it
      local out, status = on_terminal("1+2\\nhelp\\n\\004", "LWOPT_HISTORY=" .. file .. "/h")
      assert.equal(0, status, out)
      assert.matches("history not saved: cannot write " .. file .. "/h: Not a directory", out,
         1, true)
      assert.matches("lw> 1+2\n3\n", out, 1, true)
      assert.matches("History: history not saved", out, 1, true)
      os.remove(file)
   end)

   it("on a terminal without lua-readline, says so once and reads lines plainly", function()
      if select(2, helpers.sh("command -v script")) ~= 0 then
         return pending("script(1) (util-linux) is not installed")
      end
      -- a LUA_PATH without the system's folders: no readline.lua
      local out, status = on_terminal("1+2\\n\\004", "LUA_PATH='/nonexistent/?.lua'")
      assert.equal(0, status, out)
      -- (the terminal echoed 1+2 as it was typed, before the session started)
      assert.matches("\nno line editing or history: lua-readline is not installed "
         .. "(scripts/deps.sh installs it)\nlw> 3\n", out, 1, true)
   end)
end)
