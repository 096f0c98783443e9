-- cli_logs.lua: the commands over training logs: `lwopt plot` (several runs' losses on one
-- gnuplot chart), `lwopt compare` (each run's final figures in a table) and `lwopt csv` (a run's
-- step records as CSV): their flags, usage and printing. Reading the logs, the tables and the
-- chart are the library's (lwopt.logs).
local flags = require("lwopt.flags")
local logs = require("lwopt.logs")
local errors = require("lwopt.errors")

local cli_logs = {}

local COMMANDS = {
   plot = {
      args = "LOG.jsonl [LOG.jsonl ...]",
      about = "several runs' training and validation losses on one chart (gnuplot), or their "
         .. "largest attention logits",
      flags = {
         { "out", "string", "loss.png", "the chart (PNG); gnuplot's table of points is kept "
           .. "beside it (.dat)" },
         { "x", { "step", "tokens" }, "step", "what the losses are drawn against" },
         { "y", { "loss", "max-logit" }, "loss", "what is drawn: the losses, or each step's "
           .. "largest pre-softmax attention logit over the layers (the log's max_logit)" },
         { "help", "bool", false, "this text" },
      },
   },
   compare = {
      args = "LOG.jsonl [LOG.jsonl ...]",
      about = "each run's final figures in a table: steps, tokens, final training and "
         .. "validation loss, median tokens/s, peak memory per rank, wall time",
      flags = {
         { "csv", "bool", false, "print the table as CSV" },
         { "help", "bool", false, "this text" },
      },
   },
   csv = {
      args = "LOG.jsonl [OUT.csv]",
      about = "one CSV row per step of the step records' flat fields (to OUT.csv, or stdout)",
      flags = { { "help", "bool", false, "this text" } },
   },
}

local function usage_text(name)
   local c = COMMANDS[name]
   return ("usage: lwopt %s [flags] %s\n%s\n%s"):format(name, c.args, c.about,
      flags.usage(c.flags))
end

local function write_file(path, text)
   local f, err = io.open(path, "w")
   if f == nil then errors.fail(nil, "cannot write %s", err) end
   local ok, why = f:write(text)
   local closed, close_why = f:close()
   if not (ok and closed) then
      errors.fail(nil, "cannot write %s (%s)", path, tostring(why or close_why))
   end
end

local run_command = {}

function run_command.plot(v, paths, out)
   local list = logs.read_all(paths)
   local png, why = logs.plot(list, { out = v.out, x = v.x, y = v.y, keep_data = true })
   if png == nil then errors.raise(why) end
   out:write(("chart: %s (points: %s)\n"):format(png, (png:gsub("%.png$", "")) .. ".dat"))
end

function run_command.compare(v, paths, out)
   local summaries = {}
   for i, log in ipairs(logs.read_all(paths)) do summaries[i] = logs.summary(log) end
   if v.csv then
      out:write(logs.compare_csv(summaries))
   else
      out:write(logs.compare_table(summaries), "\n")
   end
end

function run_command.csv(_, paths, out)
   local text = logs.csv(logs.read(paths[1]))
   if paths[2] then
      write_file(paths[2], text)
   else
      out:write(text)
   end
end

-- `lwopt NAME argv...` for NAME plot, compare or csv: status 0, 1 (a log that cannot be read, a
-- chart that cannot be drawn: one line on err) or 2 (a usage error).
function cli_logs.main(name, argv, out, err)
   local c = COMMANDS[name]
   local help = ("lwopt %s --help"):format(name)
   local v, positional = flags.parse(argv, c.flags)
   if v == nil then
      err:write("lwopt: ", positional, " (", help, " lists them)\n")
      return 2
   end
   if v.help then
      out:write(usage_text(name), "\n")
      return 0
   end
   local most_args = name == "csv" and 2 or math.huge
   if #positional == 0 or #positional > most_args then
      err:write(("lwopt %s: %s (usage: lwopt %s %s)\n"):format(name, #positional == 0
         and "no log given" or "at most a log and an output file", name, c.args))
      return 2
   end
   local ok, why = pcall(run_command[name], v, positional, out)
   if not ok then
      err:write(("lwopt %s: %s\n"):format(name, tostring(why)))
      return 1
   end
   return 0
end

return cli_logs
