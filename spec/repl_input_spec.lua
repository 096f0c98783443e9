-- repl_input_spec.lua: where the REPL's lines come from: the history file's place, plain reads
-- from a file, and bin/lwopt repl on a pseudo-terminal (script(1)) with readline: a line
-- recalled with Up, the history written as lines are entered and read by the next session, a
-- history file that cannot be written leaving the session working, a history path that is no
-- regular file turning the history off, and a long history cut whole or not at all.
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
-- (screen) and the exit status. env: variables (and a command, such as timeout, to run script
-- under); limits: shell commands run first (ulimit).
local function on_terminal(keys, env, limits)
   local out, status = helpers.sh(("cd /tmp && %s printf '%s' | %s script -qec '%s/bin/lwopt repl' "
      .. "/dev/null"):format(limits or "", keys, env, root))
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
      local dir = helpers.fresh_path()
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

   it("on a terminal, turns the history off in one line when its path is no regular file",
      function()
      local why = terminal_pending()
      if why then return pending(why) end
      local dir = helpers.fresh_path()
      assert.equal(0, select(2, helpers.sh("mkdir -p " .. dir .. " && mkfifo " .. dir .. "/fifo")))
      -- a directory, a device that never ends and a FIFO no one writes: each read would crash,
      -- spin or wait; timeout ends a session that does
      for path, line in pairs({ [dir] = dir .. " is a directory",
         ["/dev/zero"] = "/dev/zero is not a regular file",
         [dir .. "/fifo"] = dir .. "/fifo is not a regular file" }) do
         local out, status = on_terminal("1+2\\nhelp\\n\\004", "LWOPT_HISTORY=" .. path
            .. " timeout 60")
         assert.equal(0, status, out)
         assert.matches("\nhistory off: " .. line .. "\n", out, 1, true)
         assert.matches("lw> 1+2\n3\n", out, 1, true)
         assert.matches("History: history off: " .. line, out, 1, true)
      end
      assert.equal(0, select(2, helpers.sh("rm -rf " .. dir)))
   end)

   it("on a terminal, cuts a long history to its last lines whole or not at all", function()
      local why = terminal_pending()
      if why then return pending(why) end
      local file = os.tmpname()
      local lines = {}
      for i = 1, repl_input.KEEP + 500 do lines[i] = ("print(%d)"):format(i) end
      local old = table.concat(lines, "\n") .. "\n"
      local f = assert(io.open(file, "wb"))
      f:write(old)
      f:close()
      -- under a file-size limit far below the history's size (ulimit -f counts 512-byte blocks
      -- in sh), with SIGXFSZ ignored so that a write past it fails instead of ending the process
      local out, status = on_terminal("1+2\\n\\004", "LWOPT_HISTORY=" .. file,
         "trap '' XFSZ; ulimit -f 4;")
      assert.equal(0, status, out)
      assert.equal(old, helpers.slurp(file))
      assert.is_nil(io.open(file .. ".new"))
      -- the line entered cannot be appended either: said once, and the session goes on
      assert.matches("lw> 1+2\nhistory not saved from here on: cannot write " .. file
         .. "\n3\n", out, 1, true)
      -- without the limit: the last KEEP lines, then the line entered
      out, status = on_terminal("1+2\\n\\004", "LWOPT_HISTORY=" .. file)
      assert.equal(0, status, out)
      assert.equal(table.concat(lines, "\n", 501) .. "\n1+2\n", helpers.slurp(file))
      assert.is_nil(io.open(file .. ".new"))
      os.remove(file)
   end)

   it("reads at most MAX_BYTES of a history file, and only a regular file", function()
      local file = helpers.tempfile(("x = 1\n"):rep(50))
      local keep = repl_input.MAX_BYTES
      repl_input.MAX_BYTES = 100
      local history, why = repl_input.open_history(file)
      repl_input.MAX_BYTES = keep
      assert.is_nil(history)
      assert.equal("history off: " .. file .. " has 300 bytes, more than the 100 expected", why)
      history = assert(repl_input.open_history(file))
      assert.equal(50, #history.lines)
      history.file:close()
      assert.same({ nil, "history off: /dev/null is not a regular file" },
         { repl_input.open_history("/dev/null") })
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
