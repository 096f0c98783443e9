-- bench/peer_runs.lua: what the benchmarks against a PyTorch CPU peer share (bench/peers.lua,
-- bench/models.lua): Debian's python3-torch, installed on demand; a peer's `RESULT {json}` line;
-- interleaved rounds (every configuration once per round, the order rotated from round to
-- round); and a configuration's best and median tokens/s and the paired ratio of two over the
-- rounds. It measures nothing itself.
--    local peer = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/peer_runs.lua")
local dkjson = require("dkjson")

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local median = dofile(here .. "/recipe_runs.lua").median

local peer = {}

-- The script's flags (arg) by spec (lwopt.flags), its usage printed and the script ended for
-- --help (status 0) or a bad flag (status 2); script: its path, for the usage line.
function peer.flags(spec, script)
   local flags = require("lwopt.flags")
   local v, rest = flags.parse(arg, spec)
   if v == nil or #rest > 0 then
      io.stderr:write(tostring(v == nil and rest or ("unexpected argument " .. rest[1])), "\n",
         flags.usage(spec), "\n")
      os.exit(2)
   end
   if v.help then
      print(("usage: bin/lwopt run %s [flags]\n"):format(script) .. flags.usage(spec))
      os.exit(0)
   end
   return v
end

-- Debian's: the only python3 that imports Debian's torch
peer.PYTHON = "/usr/bin/python3"

-- A shell command's success (os.execute's status in Lua 5.1 and 5.2 alike).
function peer.sh(cmd)
   local ok = os.execute(cmd)
   return ok == 0 or ok == true
end

-- A shell command's standard output.
function peer.read(cmd)
   local pipe = assert(io.popen(cmd))
   local out = pipe:read("*a")
   pipe:close()
   return out
end

-- A file's first line, "" when it cannot be read (/proc/loadavg).
function peer.first_line(path)
   local f = io.open(path)
   if not f then return "" end
   local line = f:read("*l") or ""
   f:close()
   return line
end

-- "<CPU model>, <n> cores": the machine in a header line.
function peer.machine()
   local cpu = peer.read("grep -m1 'model name' /proc/cpuinfo"):match(":%s*(.-)%s*$") or "?"
   return ("%s, %s cores"):format(cpu, (peer.read("nproc"):gsub("%s", "")))
end

-- torch's version. When python3 cannot import torch: installed with apt-get when running as
-- root (exit 1 when that fails), else the command is printed and the script exits 77.
function peer.torch_version()
   if not peer.sh(peer.PYTHON .. " -c 'import torch' 2>/dev/null") then
      if peer.read("id -u"):match("^0") then
         print("python3-torch is missing: apt-get install -y python3-torch")
         if not peer.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch "
               .. "> /dev/null") then
            io.stderr:write("apt-get install -y python3-torch failed\n")
            os.exit(1)
         end
      else
         print("skipped: python3 cannot import torch; install Debian's with\n"
            .. "  sudo apt-get install -y python3-torch")
         os.exit(77)
      end
   end
   return (peer.read(peer.PYTHON .. " -c 'import torch; print(torch.__version__)'"):gsub(
      "%s+$", ""))
end

-- Runs a peer's command and returns its `RESULT {json}` line decoded; a run without one is an
-- error naming the command, with its output.
function peer.result(cmd)
   local out = peer.read(cmd .. " 2>&1")
   local json = out:match("RESULT (%b{})")
   assert(json, "failed: " .. cmd .. "\n" .. out)
   return dkjson.decode(json)
end

-- n rounds over order (a list of configurations, any values): each round calls run(item,
-- round) once per item, round r starting at item r (then r + 1, .., wrapping), so that no
-- configuration always runs first or after the same one.
function peer.rounds(order, n, run)
   for round = 1, n do
      for i = 0, #order - 1 do
         run(order[(i + round - 1) % #order + 1], round)
      end
   end
end

-- Of a configuration's runs (tables with `key`, default "tps"), the run with the highest and
-- the median of the values.
function peer.summary(list, key)
   key = key or "tps"
   local best, values = list[1], {}
   for i, r in ipairs(list) do
      values[i] = r[key]
      if r[key] > best[key] then best = r end
   end
   return best, median(values)
end

-- The median over rounds of a[i][key] / b[i][key]: two runs of one round are minutes apart at
-- most, so a load that comes and goes moves both.
function peer.paired(a, b, key)
   key = key or "tps"
   local ratios = {}
   for i, r in ipairs(a) do ratios[i] = r[key] / b[i][key] end
   return median(ratios)
end

peer.median = median

return peer
