-- cli_logs_spec.lua: the commands over training logs (app/cli_logs.lua), `lwopt plot`, `lwopt
-- compare` and `lwopt csv`, on small logs written here (helpers.two_logs: one run, and one
-- resumed run appending to its log).
local json = require("lwopt.json")
local cli = require("lwopt.app.cli")
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")
local bin = root .. "/bin/lwopt"

local config, step, write_log = helpers.log_config, helpers.log_step, helpers.write_log

local function run(argv)
   local out, err = helpers.sink(), helpers.sink()
   local status = cli.main(argv, out, err)
   return status, out.text(), err.text()
end

describe("lwopt plot, compare and csv", function()
   local dir
   before_each(function() dir = helpers.tempdir() end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   local function two_runs() return helpers.two_logs(dir) end

   describe("lwopt compare", function()
      it("prints a table of each run's final figures", function()
         local a, b = two_runs()
         local status, out, err = run({ "compare", a, b })
         assert.equal(0, status, err)
         assert.equal(table.concat({
            "run  steps  tokens  final loss  final val  tokens/s  peak MiB  wall s",
            "a        4    1024      4.5000     4.7500      2500      24.0     4.0",
            "b        6    1536      3.2500     3.5000      3500      26.0     8.0",
         }, "\n") .. "\n", out)
      end)

      it("prints the table as CSV with --csv, exact numbers and empty cells", function()
         local a = two_runs()
         local status, out = run({ "compare", "--csv", a })
         assert.equal(0, status)
         assert.equal("run,path,steps,tokens,final_loss,final_val_loss,tokens_per_s_median,"
            .. "peak_mb,gpu_mb,wall_s\na," .. a .. ",4,1024,4.5,4.75,2500,24,,4\n", out)
      end)

      it("names runs that share a file name by their run ids", function()
         local _, b = two_runs()
         assert(os.execute("mkdir -p " .. dir .. "/x") == 0)
         local other = write_log(dir .. "/x/b.jsonl", { config({ run_id = "run-c" }),
            step(1, 3) })
         local _, out = run({ "compare", b, other })
         assert.matches("\nrun%-b ", out)
         assert.matches("\nrun%-c ", out)
      end)

      it("says which log it cannot read, with status 1, and usage errors with status 2",
         function()
         local status, out, err = run({ "compare", dir .. "/none.jsonl" })
         assert.same({ 1, "" }, { status, out })
         assert.matches("^lwopt compare: cannot read .*none%.jsonl: No such file", err)
         status, _, err = run({ "compare" })
         assert.equal(2, status)
         assert.equal("lwopt compare: no log given (usage: lwopt compare LOG.jsonl [LOG.jsonl "
            .. "...])\n", err)
         status, _, err = run({ "compare", "--csvv", "a.jsonl" })
         assert.equal(2, status)
         assert.equal("lwopt: unknown flag --csvv (did you mean --csv?) (lwopt compare --help "
            .. "lists them)\n", err)
         status, out = run({ "compare", "--help" })
         assert.equal(0, status)
         assert.matches("usage: lwopt compare [flags] LOG.jsonl", out, 1, true)
      end)
   end)

   describe("lwopt csv", function()
      it("writes one row per step of the flat fields, the leading ones first", function()
         local _, b = two_runs()
         local status, out = run({ "csv", b })
         assert.equal(0, status)
         local lines = {}
         for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
         assert.equal(7, #lines)
         assert.equal("step,wall_time,tokens,loss,val_loss,lr,grad_norm,tokens_per_s,comm_mb,"
            .. "time_ms.bwd,time_ms.fwd", lines[1])
         assert.equal("1,1001,256,3.875,,0.001,1.5,1000,0.5,2.5,1.25", lines[2])
         assert.equal("2,2002,512,3.75,4,0.002,1.5,2000,0.5,2.5,1.25", lines[3]) -- resumed's
      end)

      it("writes to OUT.csv when given one, quoting text that needs it", function()
         local path = write_log(dir .. "/t.jsonl", { step(1, 5, { note = 'a "b", c' }) })
         local status = run({ "csv", path, dir .. "/t.csv" })
         assert.equal(0, status)
         local text = helpers.sh("cat " .. dir .. "/t.csv")
         assert.matches(',note,', text, 1, true)
         assert.matches(',"a ""b"", c",', text, 1, true)
         status = select(1, run({ "csv", path, dir .. "/t.csv", "extra" }))
         assert.equal(2, status)
      end)
   end)

   describe("lwopt plot", function()
      local has_gnuplot = select(2, helpers.sh("command -v gnuplot")) == 0

      it("draws several runs on one chart and keeps gnuplot's points beside it", function()
         if not has_gnuplot then return pending("gnuplot is not installed") end
         local a, b = two_runs()
         local png = dir .. "/chart.png"
         local status, out, err = run({ "plot", a, b, "--out", png })
         assert.equal(0, status, err)
         assert.equal(("chart: %s (points: %s/chart.dat)\n"):format(png, dir), out)
         local f = assert(io.open(png, "rb"))
         assert.equal("\137PNG", f:read(4))
         f:close()
         -- per run a block of training losses and one of validation losses, by step
         local dat = helpers.sh("cat " .. dir .. "/chart.dat")
         local blocks = {}
         for block in (dat .. "\n\n\n"):gmatch("(.-)\n\n\n") do blocks[#blocks + 1] = block end
         assert.equal(4, #blocks)
         assert.equal("1 4.875\n2 4.75\n3 4.625\n4 4.5", blocks[1])
         assert.equal("2 5\n4 4.75", blocks[2])
         assert.equal("1 3.875\n2 3.75\n3 3.625\n4 3.5\n5 3.375\n6 3.25", blocks[3])
         assert.equal("2 4\n4 3.75\n6 3.5", blocks[4])
      end)

      it("draws against tokens with --x tokens, and refuses a log without token counts",
         function()
         if not has_gnuplot then return pending("gnuplot is not installed") end
         local a = two_runs()
         local png = dir .. "/tokens.png"
         local status, _, err = run({ "plot", "--x", "tokens", "--out", png, a })
         assert.equal(0, status, err)
         assert.matches("^256 4.875\n512 4.75\n", helpers.sh("cat " .. dir .. "/tokens.dat"))
         local old = write_log(dir .. "/old.jsonl", { step(1, 5, { tokens = json.null }) })
         status, _, err = run({ "plot", "--x", "tokens", "--out", png, old })
         assert.equal(1, status)
         assert.equal("lwopt plot: " .. old .. " has no token counts (it was written before logs "
            .. "had them): plot it with --x step\n", err)
      end)

      it("draws each run's largest attention logit over the layers with --y max-logit, and "
         .. "refuses a log without them", function()
         if not has_gnuplot then return pending("gnuplot is not installed") end
         local a = write_log(dir .. "/logits.jsonl", { config(),
            step(1, 5, { max_logit = json.array({ 1.5, 2.25 }) }),
            step(2, 5, { max_logit = json.array({ 3, json.null }) }),
            step(3, 5, { max_logit = json.array({ json.null, json.null }) }) })
         local png = dir .. "/logits.png"
         local status, _, err = run({ "plot", "--y", "max-logit", "--out", png, a })
         assert.equal(0, status, err)
         -- one block, no validation points; a step with no finite logit is a gap
         assert.equal("1 2.25\n2 3\n3 NaN\n", helpers.sh("cat " .. dir .. "/logits.dat"))
         local _, b = two_runs()
         status, _, err = run({ "plot", "--y", "max-logit", "--out", png, a, b })
         assert.equal(1, status)
         assert.equal("lwopt plot: " .. b .. " has no max_logit in its step records (a run logs "
            .. "it with --log or --qk-clip): plot its loss instead\n", err)
      end)

      it("says that gnuplot is missing, and how to install it", function()
         local a = two_runs()
         local out, status = helpers.sh("cd " .. dir .. " && PATH=/nonexistent /usr/bin/luajit "
            .. bin .. " plot " .. a)
         assert.equal(1, status)
         assert.equal("lwopt plot: gnuplot is not installed (on Debian: apt-get install "
            .. "gnuplot-nox, which scripts/deps.sh installs)\n", out)
      end)

      it("refuses a log without steps and a bad --x", function()
         local empty = write_log(dir .. "/empty.jsonl", { config() })
         local status, _, err = run({ "plot", "--out", dir .. "/e.png", empty })
         assert.equal(1, status)
         assert.equal("lwopt plot: " .. empty .. " has no step records\n", err)
         status, _, err = run({ "plot", "--x", "time", empty })
         assert.equal(2, status)
         assert.matches("--x must be one of step|tokens, got 'time'", err, 1, true)
      end)
   end)

   it("is listed by lwopt help", function()
      local _, out = run({ "help" })
      for _, name in ipairs({ "plot LOG", "compare LOG", "csv LOG" }) do
         assert.matches("\n  " .. name, out, 1, true)
      end
   end)
end)
