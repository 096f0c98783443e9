-- logs/plot.lua: the loss chart of lw.logs.plot (`lwopt plot`, and the loss curve a recipe draws at
-- its end), or the chart of the runs' largest attention logits (`--y max-logit`): the runs' points
-- written as gnuplot's table, a gnuplot script over it, and the PNG checked whole. Apart from
-- init.lua, which reads the logs and makes the tables, because this is the one part that drives an
-- outside program. tokens_of (from logs.plot) is init.lua's: the tokens through a step record.
local json = require("lwopt.json")
local errors = require("lwopt.errors")

local plotter = {}

-- A record's field as a number, as init.lua reads them: nil when absent, null or not a number.
local function number(x) return type(x) == "number" and x or nil end

-- Text inside a gnuplot single-quoted string: '' for ', control characters dropped.
local function gp_quote(s)
   return "'" .. tostring(s):gsub("%c", ""):gsub("'", "''") .. "'"
end

-- The unit of the losses (nats per byte or token) when every run's configuration says the same.
local function common_unit(list)
   local unit
   for _, log in ipairs(list) do
      local c = log.configs[1]
      local u = c and type(c.unit) == "string" and c.unit or nil
      if u == nil or (unit and u ~= unit) then return nil end
      unit = u
   end
   return unit
end

-- A step record's largest attention logit over its layers (max_logit), or nil.
local function max_logit(rec)
   local top
   if type(rec.max_logit) ~= "table" then return nil end
   for _, v in ipairs(rec.max_logit) do
      if number(v) then top = math.max(top or v, v) end
   end
   return top
end

-- Writes gnuplot's table of points for the runs: per run a block of (x, training loss) and,
-- when it has any, one of (x, validation loss), blocks apart by two blank lines (gnuplot's
-- `index`); with y "max-logit" one block per run of (x, its largest logit over the layers). A
-- non-finite value is NaN: a gap in the line. Returns the plot clauses, dat being the table's
-- path.
local function write_points(f, dat, list, x, tokens_of, y)
   local clauses, index = {}, 0
   local function block(lines)
      if index > 0 then f:write("\n\n") end
      f:write(table.concat(lines, "\n"), "\n")
      index = index + 1
      return index - 1
   end
   for i, log in ipairs(list) do
      local train, val, logged = {}, {}, false
      for _, rec in ipairs(log.steps) do
         local at = rec.step
         if x == "tokens" then at = tokens_of(log, rec) end
         if at == nil then
            errors.fail(nil, "%s has no token counts (it was written before logs had them): "
               .. "plot it with --x step", log.path)
         end
         local loss = number(rec.loss)
         if y == "max-logit" then
            loss, logged = max_logit(rec), logged or rec.max_logit ~= nil
         end
         train[#train + 1] = ("%s %s"):format(json.encode(at), loss and json.encode(loss) or "NaN")
         if y ~= "max-logit" and number(rec.val_loss) then
            val[#val + 1] = ("%s %s"):format(json.encode(at), json.encode(rec.val_loss))
         end
      end
      if y == "max-logit" and not logged then
         errors.fail(nil, "%s has no max_logit in its step records (a run logs it with --log or "
            .. "--qk-clip): plot its loss instead", log.path)
      end
      -- one run: "train" and "validation"; several: each named
      local prefix = #list == 1 and "" or log.name .. " "
      local title = y ~= "max-logit" and prefix .. "train" or #list == 1 and "largest logit"
         or log.name
      clauses[#clauses + 1] = ("%s index %d using 1:2 with lines lw 1.5 lc %d title %s")
         :format(gp_quote(dat), block(train), i, gp_quote(title))
      if #val > 0 then
         clauses[#clauses + 1] = ("%s index %d using 1:2 with linespoints pt 7 ps 0.7 dt 2 lc %d "
            .. "title %s"):format(gp_quote(dat), block(val), i, gp_quote(prefix .. "validation"))
      end
   end
   return clauses
end

-- Whether the file at path ends as a whole PNG does (its IEND chunk): gnuplot does not notice a
-- full disk.
local function whole_png(path)
   local f = io.open(path, "rb")
   if f == nil then return false end
   f:seek("end", -math.min(12, f:seek("end")))
   local tail = f:read("*a") or ""
   f:close()
   return tail == "\0\0\0\0IEND\174\66\96\130"
end

-- logs.plot(list, opts) (init.lua says what opts holds).
function plotter.plot(list, opts, tokens_of)
   local out, x, y = opts.out, opts.x or "step", opts.y or "loss"
   local dat = opts.data or ((out:gsub("%.png$", "")) .. ".dat")
   for _, log in ipairs(list) do
      if #log.steps == 0 then return nil, log.path .. " has no step records" end
   end
   local f, err = io.open(dat, "w")
   if f == nil then return nil, err end
   local ok, clauses = pcall(write_points, f, dat, list, x, tokens_of, y)
   -- buffered: a full disk may show only when the last of it is flushed
   local closed, close_why = f:close()
   if not ok then
      os.remove(dat)
      return nil, clauses
   end
   if not closed then
      os.remove(dat)
      return nil, ("cannot write %s (%s)"):format(dat, tostring(close_why))
   end
   local names = {}
   for i, log in ipairs(list) do names[i] = log.name end
   local unit = opts.unit or common_unit(list)
   local script = table.concat({
      "set terminal pngcairo noenhanced size 800,480",
      "set output " .. gp_quote(out),
      "set title " .. gp_quote((y == "max-logit" and "largest attention logit: " or "loss: ")
         .. table.concat(names, ", ")),
      "set xlabel " .. gp_quote(x == "tokens" and "tokens" or "step"),
      x == "tokens" and "set format x '%.1s%c'" or "",
      "set ylabel " .. gp_quote(y == "max-logit" and "largest q.k/sqrt(d) over the layers"
         or unit and ("loss (nats/%s)"):format(unit) or "loss (nats)"),
      "set grid", "set key top right",
      "plot " .. table.concat(clauses, ", "),
   }, "\n") .. "\n"
   local gp = os.tmpname()
   local g, cannot = io.open(gp, "w")
   if g == nil then errors.fail(nil, "%s", cannot) end
   g:write(script)
   g:close()
   local pipe = io.popen("gnuplot '" .. gp .. "' 2>&1; echo \"status $?\"")
   local said = pipe:read("*a")
   pipe:close()
   os.remove(gp)
   if not opts.keep_data then os.remove(dat) end
   local status = tonumber(said:match("status (%d+)%s*$"))
   if status == 127 then
      return nil, "gnuplot is not installed (on Debian: apt-get install gnuplot-nox, which "
         .. "scripts/deps.sh installs)"
   end
   said = said:gsub("status %d+%s*$", ""):gsub("%s+$", ""):match("[^\n]*$")
   if status ~= 0 then return nil, "gnuplot failed: " .. said end
   if not whole_png(out) then
      os.remove(out) -- a cut-off picture is no chart
      return nil, ("gnuplot could not write the whole of %s (is the disk full?)%s"):format(out,
         said ~= "" and " (" .. said .. ")" or "")
   end
   return out
end

return plotter
