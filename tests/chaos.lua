-- chaos.lua: the main job (recipes/gpt_small.lua, tiny preset, 2 ranks, checkpoints every few
-- steps) killed at random and resumed: it must end as if it had never been killed.
--   1. One uninterrupted run is the reference; watching it gives the job's timeline (startup,
--      seconds per step) and how long a save takes (DIR/step-N.tmp seen until its rename).
--   2. The same job runs again into a fresh checkpoint directory, always with --resume, and is
--      killed N times: SIGKILL of one random rank process (a child of the mpirun started here),
--      at N moments drawn uniformly over the reference's duration, in order. A launch resuming
--      at checkpoint C is killed at the moment's offset past step C of the timeline; a share
--      of the kills waits from that moment for the next save to start (a new step-N.tmp) and
--      lands within it. After a kill the job must end non-zero with none of its processes left
--      running; then it is relaunched. A launch that ends before its kill ends the loop (and
--      must have succeeded); after the loop one more launch runs to the end.
--   3. The final --save-params file must be byte-identical to the reference's, and the losses
--      (the last log record of each step: resumed runs append) equal to the reference's.
-- Before the kills: a second job on a running job's checkpoint directory is refused, naming the
-- lock's holder, and a kill -9 of the holder frees the directory for the next job at once.
-- The seed fixes the schedule (moments, ranks, which kills aim at saves), not what the job is
-- doing when a kill lands: that depends on the machine's timing. A launch that fails by itself
-- (something a kill left that the resume could not handle) is reported with what was on disk.
-- Prints the seed, one line per kill, a summary and "N passed, M failed".
-- Usage: bin/lwopt run tests/chaos.lua [--kills N] [--seed S] [--steps S] [--every K]
--        [--save-share F] [--np N] [--keep-files]
local ffi = require("ffi")
local flags = require("lwopt.flags")
local json = require("lwopt.json")
local lib = require("lwopt.C").lib

-- libc for the test's own process control; the job under test is driven only through its
-- command line, exit status, files and log
ffi.cdef [[
int kill(int pid, int sig);
int usleep(unsigned int usec);
int access(const char *path, int mode);
int getpid(void);
]]
local SIGKILL = 9

local root = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/.."
local tally = dofile(root .. "/tests/lua/tally.lua")
local expect = tally.expect

local list = {
   { "kills", "int", 10, "kills to make (fewer if the job finishes first)" },
   { "seed", "int", nil, "seed of the kill schedule (default: from the clock, printed)" },
   { "steps", "int", 40, "optimizer steps of the job" },
   { "every", "int", 2, "steps between checkpoints (--ckpt-every)" },
   { "save-share", "number", 1 / 3, "share of the kills aimed at saves in progress" },
   { "np", "int", 2, "ranks" },
   { "keep-files", "bool", false, "keep the work directory even when every check passes" },
   { "help", "bool", false, "this text" },
}
local v, positional = flags.parse(arg, list)
if v == nil or #positional > 0 or v.help then
   io.stderr:write(v == nil and (positional .. "\n") or "",
      "usage: bin/lwopt run tests/chaos.lua [flags]\n", flags.usage(list), "\n")
   os.exit(v ~= nil and v.help and 0 or 2)
end
local seed = v.seed or (os.time() * 1000 + ffi.C.getpid()) % 2147483647
math.randomseed(seed)
local S, np = v.steps, v.np
print(("chaos: seed %d (replay the schedule with --seed %d), %d kills planned, %d steps, "
   .. "checkpoints every %d, %d ranks"):format(seed, seed, v.kills, S, v.every, np))

local sh = tally.sh

local slurp = tally.slurp

local function exists(path) return ffi.C.access(path, 0) == 0 end
local function sleep(s) ffi.C.usleep(math.floor(s * 1e6)) end
local now = lib.lw_now

local work = assert(io.popen("mktemp -d /tmp/lwopt-chaos.XXXXXX")):read("*l")
assert(work and work ~= "", "mktemp -d failed")

-- Checkpoint steps the job saves at; a save of step n exists as DIR/step-n.tmp until renamed.
local saves = {}
for n = 1, S do
   if n % v.every == 0 or n == S then saves[#saves + 1] = n end
end
local function final_name(dir, n) return ("%s/step-%09d"):format(dir, n) end
local function tmp_name(dir, n) return final_name(dir, n) .. ".tmp" end

-- The step DIR/latest names, 0 when there is none.
local function latest_step(dir)
   local text = slurp(dir .. "/latest")
   return text and tonumber(text:match("^step%-(%d+)")) or 0
end

-- The job's log: the last record of each step (a resumed run appends, each launch's
-- configuration record first), malformed lines and the last step; from byte `from` on (the
-- records a launch appended), when given.
local function read_log(path, from)
   local by_step, bad, last = {}, {}, 0
   local f = io.open(path, "r")
   if f == nil then return by_step, bad, last end
   if from and f:seek("end") >= from then f:seek("set", from) else f:seek("set", 0) end
   local n = 0
   for line in f:lines() do
      n = n + 1
      local ok, rec = pcall(json.decode, line)
      local config = ok and type(rec) == "table" and rec.kind == "config"
      if ok and type(rec) == "table" and type(rec.step) == "number"
         and type(rec.loss) == "number" then
         by_step[rec.step] = rec
         last = math.max(last, rec.step)
      elseif not config then -- a launch's configuration record holds no step
         bad[#bad + 1] = ("line %d: %s"):format(n, line:sub(1, 80))
      end
   end
   f:close()
   return by_step, bad, last
end

-- What is on disk in a checkpoint directory, for a failure report.
local function disk_state(dir)
   local p = io.popen("cd '" .. dir .. "' 2>/dev/null && ls -la --full-time . * 2>&1; "
      .. "echo '--- latest:'; cat latest 2>&1; ls -la latest.tmp 2>/dev/null")
   local s = p:read("*a")
   p:close()
   return s
end

local function tail(path, n)
   local p = io.popen(("tail -n %d '%s' 2>/dev/null"):format(n, path))
   local s = p:read("*a")
   p:close()
   return s
end

-- Starts the job in the background: returns { pid (mpirun's), t0, out, rc_path }.
local launches = 0
local function launch(dir, log, params)
   launches = launches + 1
   local base = ("%s/launch-%03d"):format(work, launches)
   local cmd = ("mpirun --allow-run-as-root --oversubscribe -np %d -x OPENBLAS_NUM_THREADS=1 "
      .. "luajit '%s/recipes/gpt_small.lua' --preset tiny --sample 0 --steps %d --ckpt-dir '%s' "
      .. "--ckpt-every %d --resume --log '%s' --save-params '%s' < /dev/null > '%s.out' 2>&1")
      :format(np, root, S, dir, v.every, log, params, base)
   local t0 = now()
   assert(sh(("(%s & echo $! > '%s.pid'; wait $!; echo $? > '%s.rc') > /dev/null 2>&1 &")
      :format(cmd, base, base)), "cannot start the job")
   local job = { t0 = t0, out = base .. ".out", rc_path = base .. ".rc", n = launches }
   while job.pid == nil do
      local text = slurp(base .. ".pid")
      job.pid = text and tonumber(text:match("^(%d+)\n"))
      if job.pid == nil then
         assert(now() - t0 < 30, "the job's mpirun did not start")
         sleep(0.001)
      end
   end
   return job
end

-- The job's exit status once mpirun has ended, else nil.
local function finished(job)
   if job.rc == nil then
      local text = slurp(job.rc_path)
      job.rc = text and tonumber(text:match("^(%d+)\n"))
   end
   return job.rc
end

-- Waits for the job to end, at most `limit` seconds; nil when it did not.
local function wait(job, limit)
   local deadline = now() + limit
   while finished(job) == nil do
      if now() > deadline then return nil end
      sleep(0.005)
   end
   return job.rc
end

-- The rank processes: mpirun's children, by OMPI_COMM_WORLD_RANK; nil until all np are there.
local function ranks_of(job)
   local p = io.popen("pgrep -P " .. job.pid)
   local ranks, count = {}, 0
   for line in p:lines() do
      local pid = tonumber(line)
      local env = pid and slurp("/proc/" .. pid .. "/environ") or ""
      local r = tonumber(env:match("%zOMPI_COMM_WORLD_RANK=(%d+)%z")
         or env:match("^OMPI_COMM_WORLD_RANK=(%d+)%z"))
      if r and ranks[r] == nil then
         ranks[r] = pid
         count = count + 1
      end
   end
   p:close()
   return count == np and ranks or nil
end

-- A process's state: "gone", "zombie" or "running (<state letter>)".
local function state(pid)
   local stat = slurp("/proc/" .. pid .. "/stat")
   if stat == nil then return "gone" end
   local letter = stat:match("^%d+ %b() (%a)")
   return letter == "Z" and "zombie" or ("running (" .. tostring(letter) .. ")")
end
local function running(pid) return state(pid):match("^running") ~= nil end

-- Processes whose command line names the path (the "[x]" keeps pgrep's own shell from
-- matching itself): the job's ranks, mpirun, the shell around it, and what a rank started.
local function leftovers(dir)
   local p = io.popen("pgrep -f '[" .. dir:sub(1, 1) .. "]" .. dir:sub(2) .. "'")
   local pids = {}
   for line in p:lines() do pids[#pids + 1] = tonumber(line) end
   p:close()
   return pids
end

-- Ends a job that does not end by itself (mpirun and what is left of its ranks), so that the
-- test can go on; returns what was there, for the report.
local function end_hung(job, ranks)
   ranks = ranks or ranks_of(job) or {}
   local parts = { ("mpirun (pid %d) %s"):format(job.pid, state(job.pid)) }
   for r = 0, np - 1 do
      if ranks[r] then parts[#parts + 1] = ("rank %d (pid %d) %s"):format(r, ranks[r],
         state(ranks[r])) end
   end
   for _, pid in pairs(ranks) do ffi.C.kill(pid, SIGKILL) end
   ffi.C.kill(job.pid, SIGKILL)
   wait(job, 30)
   return table.concat(parts, ", ")
end

-- Waits for a killed job to end: its status; "ranks" when a rank is still running after 60 s;
-- "launcher" when every rank has ended but mpirun has not, 10 s later. OpenMPI 4.1.4's mpirun
-- (Debian 12, libpmix 2) can deadlock in its PMIx server's finalize when a rank is killed
-- during its PMIx handshake in MPI_Init: a hang of the launcher, not of the job's processes.
local function wait_killed(job, ranks)
   local deadline, ended_since = now() + 60, nil
   while finished(job) == nil do
      local alive = false
      for _, pid in pairs(ranks) do alive = alive or running(pid) end
      ended_since = (not alive) and (ended_since or now()) or nil
      if ended_since and now() - ended_since > 10 then return "launcher" end
      if now() > deadline then return "ranks" end
      sleep(0.01)
   end
   return job.rc
end

-- Watches a run until it ends: save durations (step-N.tmp seen until renamed), when the first
-- log record appeared and when the last save began.
local function watch(job, dir, log)
   local seen, t_first, durations = {}, nil, {}
   while finished(job) == nil do
      local t = now() - job.t0
      if t_first == nil then
         local f = io.open(log, "r")
         if f then
            if f:seek("end") > 0 then t_first = t end
            f:close()
         end
      end
      for _, n in ipairs(saves) do
         local s = seen[n]
         if exists(tmp_name(dir, n)) then
            if s == nil then seen[n] = { from = t } end
         elseif s and s.to == nil then
            s.to = t
            durations[#durations + 1] = s.to - s.from
         end
      end
      assert(t < 600, "the reference run did not end within 600 s")
      sleep(0.002)
   end
   return t_first, seen, durations
end

-- 1. the reference: uninterrupted
local ref = { dir = work .. "/ref-ckpt", log = work .. "/ref.jsonl", params = work .. "/ref.st" }
local job = launch(ref.dir, ref.log, ref.params)
local ref_job = job
local t_first, seen, durations = watch(job, ref.dir, ref.log)
local D = now() - job.t0
if job.rc ~= 0 then
   io.stderr:write("chaos: the reference run failed (status ", job.rc, "):\n", tail(job.out, 30))
   os.exit(1)
end
ref.by_step = read_log(ref.log)
ref.params_bytes = slurp(ref.params)
assert(ref.params_bytes and #ref.by_step == S and t_first and seen[S] and seen[S].from,
   "the reference run left no parameters, an incomplete log or no final save")
-- the job's timeline, from the reference: startup, then steps of per_step seconds each
local per_step = (seen[S].from - t_first) / (S - 1)
local startup = math.max(0, t_first - per_step)
-- an aimed kill lands uniformly within the shortest save seen (as measured here: from when
-- step-N.tmp appears to its rename), so that most land before the rename
local mean_save, save_span = 0, math.huge
for _, d in ipairs(durations) do
   mean_save, save_span = mean_save + d / #durations, math.min(save_span, d)
end
if #durations == 0 then save_span = 0 end
print(("reference: %.2f s (startup %.2f s, %.3f s per step, %d of %d saves seen in progress, "
   .. "%.1f ms each, the shortest %.1f ms)"):format(D, startup, per_step, #durations, #saves,
   1e3 * mean_save, 1e3 * save_span))

-- 1a. one job per checkpoint directory: while a launch runs, a second job on its directory is
-- refused at start, naming the host and pid of the rank that holds the lock; a kill -9 of that
-- rank frees the directory at once (the kernel drops the lock), so the next job takes it
do
   local dir = work .. "/locked"
   local first = launch(dir, work .. "/locked.jsonl", work .. "/locked.st")
   local ranks, holder = nil, nil
   local deadline = now() + 60
   while holder == nil and finished(first) == nil and now() < deadline do
      ranks = ranks or ranks_of(first)
      local text = slurp(dir .. "/.lwopt-lock") or ""
      local pid = tonumber(text:match("pid (%d+)"))
      if ranks and pid == ranks[0] then holder = pid else sleep(0.005) end
   end
   local second = ("luajit '%s/recipes/gpt_small.lua' --preset tiny --sample 0 --quiet --steps %d "
      .. "--stop-after 1 --ckpt-dir '%s' --resume"):format(root, S, dir)
   local function attempt()
      local p = io.popen(second .. " 2>&1; echo \"status $?\"")
      local out = p:read("*a")
      p:close()
      return out
   end
   if holder then
      local out = attempt()
      expect(out:find(("is in use by another job (host %s, pid %d)"):format(
         (slurp("/proc/sys/kernel/hostname") or ""):gsub("%s", ""), holder), 1, true)
         and out:find("status 1\n", 1, true),
         "a second job on a running job's checkpoint directory is refused with its host and "
         .. "pid: " .. out)
      ffi.C.kill(holder, SIGKILL)
      wait_killed(first, ranks)
      out = attempt()
      expect(out:find("status 0\n", 1, true), "after a kill -9 of the lock's holder the next "
         .. "job takes the directory: " .. out)
   else
      expect(false, "the first job held the lock of its checkpoint directory within 60 s")
      end_hung(first)
   end
   sh("rm -rf '" .. dir .. "'")
end

-- 2. the schedule: N moments uniform over the job's duration, sorted; which rank each kill
-- hits, whether it waits for the next save to start, and how far into that save it lands
local plan = {}
for i = 1, v.kills do
   plan[i] = { moment = math.random() * D, rank = math.random(0, np - 1),
      aim = math.random() < v.save_share, into = math.random() }
end
table.sort(plan, function(a, b) return a.moment < b.moment end)

local run = { dir = work .. "/ckpt", log = work .. "/run.jsonl", params = work .. "/run.st" }
local stats = { kills = 0, aimed = 0, in_save = 0, during_save = 0, waited_for_ranks = 0,
   launcher_hangs = 0, resumes = 0, from_checkpoint = 0, redone = 0, finished_early = 0,
   by_rank = {} }
for r = 0, np - 1 do stats.by_rank[r] = 0 end
local t_chaos = now()
local broken = false

-- Starts a chaos launch; every one after the first is a resume (from scratch when no
-- checkpoint was complete yet).
local function relaunch()
   local resume_at = latest_step(run.dir)
   local before = disk_state(run.dir)
   local f, size = io.open(run.log, "r"), 0
   if f then size = f:seek("end"); f:close() end
   local j = launch(run.dir, run.log, run.params)
   -- a launch from scratch rewrites the log, a resumed one appends to it
   j.before, j.resume_at, j.log_size = before, resume_at, resume_at > 0 and size or nil
   if j.n > 2 then
      stats.resumes = stats.resumes + 1
      if resume_at > 0 then stats.from_checkpoint = stats.from_checkpoint + 1 end
   end
   return j
end

-- The job failed without being killed: what a resume could not handle. Reports it and stops.
local function report_broken(job, what)
   broken = true
   expect(false, what)
   io.stderr:write("chaos: launch ", job.n, " ended with status ", tostring(job.rc),
      " without a kill; its output ends:\n", tail(job.out, 30),
      "\nchaos: the checkpoint directory ", run.dir, " held before it:\n", job.before, "\n")
end

for i, k in ipairs(plan) do
   job = relaunch()
   local resume_at = job.resume_at
   -- this launch starts where the job's timeline had reached checkpoint resume_at
   local at = math.max(0, k.moment - resume_at * per_step)
   -- step-N.tmp and step-N directories already there are no sign of this launch's saves
   local stale, stale_final = {}, {}
   for _, n in ipairs(saves) do
      stale[n] = exists(tmp_name(run.dir, n))
      stale_final[n] = exists(final_name(run.dir, n))
   end
   -- the rank pids are looked up (a fork of pgrep, tens of ms on a busy machine) as soon as
   -- the ranks are there, not at the kill moment
   local target, target_seen, fire, ranks = nil, nil, nil, nil
   local waited, looked = false, -1
   while fire == nil and finished(job) == nil do
      local t = now() - job.t0
      if ranks == nil and t - looked >= 0.02 then
         ranks, looked = ranks_of(job), t
      end
      if t >= at then
         if not k.aim then
            fire = t
         elseif target == nil then
            for _, n in ipairs(saves) do
               if n > resume_at and not stale[n] and exists(tmp_name(run.dir, n)) then
                  target, target_seen = n, t
                  break
               end
            end
         elseif t >= target_seen + k.into * save_span then
            fire = t
         end
         if fire and ranks == nil then fire, waited = nil, true end
      end
      if fire == nil then sleep(0.001) end
   end
   if fire and not running(ranks[k.rank]) then
      wait(job, 60) -- the rank has ended: so is the job, or it failed
      fire = nil
   end
   if fire == nil then
      -- the job ended before its kill: done if it succeeded, a failed resume if not
      if job.rc == 0 then
         stats.finished_early = stats.finished_early + 1
         print(("kill %d: not made, launch %d finished first (planned at %.2f s)"):format(i,
            job.n, at))
      else
         report_broken(job, ("launch %d (resuming at step %d) failed by itself, status %s")
            :format(job.n, resume_at, tostring(job.rc)))
      end
      break
   end
   if waited then stats.waited_for_ranks = stats.waited_for_ranks + 1 end
   -- a save is in progress while its step-N.tmp exists
   local in_save = nil
   for _, n in ipairs(saves) do
      if n > resume_at and not stale[n] and exists(tmp_name(run.dir, n)) then in_save = n end
   end
   local t_kill = now() - job.t0
   ffi.C.kill(ranks[k.rank], SIGKILL)
   if in_save then stats.in_save = stats.in_save + 1 end
   stats.kills = stats.kills + 1
   stats.by_rank[k.rank] = stats.by_rank[k.rank] + 1
   if k.aim then stats.aimed = stats.aimed + 1 end
   local rc = wait_killed(job, ranks)
   if rc == "ranks" then
      expect(false, ("kill %d (rank %d at %.2f s): the job ends within 60 s of the kill; it "
         .. "did not: %s"):format(i, k.rank, t_kill, end_hung(job, ranks)))
      io.stderr:write("chaos: the output of launch ", job.n, " ends:\n", tail(job.out, 12), "\n")
   elseif rc == "launcher" then
      -- reported, not failed: every process of the job has ended; mpirun is ended here
      stats.launcher_hangs = stats.launcher_hangs + 1
      print(("kill %d: warning: every rank of launch %d ended but mpirun hung (the OpenMPI "
         .. "PMIx finalize deadlock); ended it: %s"):format(i, job.n, end_hung(job, ranks)))
   else
      expect(rc ~= 0, ("kill %d: the killed job ends with a non-zero status (got %d)")
         :format(i, rc))
   end
   local deadline = now() + 10
   local left
   repeat
      left = {}
      for _, pid in pairs(ranks) do
         if running(pid) then left[#left + 1] = pid end
      end
      for _, pid in ipairs(leftovers(work)) do left[#left + 1] = pid end
      if #left > 0 then sleep(0.05) end
   until #left == 0 or now() > deadline
   expect(#left == 0, ("kill %d: no process of the job is left running (pids %s)")
      :format(i, table.concat(left, " ")))
   -- a save was interrupted if it left a step-N.tmp (killed before the rename) or a step-N
   -- newer than latest (killed between the rename and the update of latest)
   local latest = latest_step(run.dir)
   local interrupted = nil
   for _, n in ipairs(saves) do
      if not stale[n] and exists(tmp_name(run.dir, n)) then
         interrupted = ("left step-%d.tmp"):format(n)
      elseif n > latest and not stale_final[n] and exists(final_name(run.dir, n)) then
         interrupted = ("left step-%d newer than latest"):format(n)
      end
   end
   if interrupted then stats.during_save = stats.during_save + 1 end
   local _, _, last = read_log(run.log, job.log_size)
   stats.redone = stats.redone + math.max(0, last - latest)
   print(("kill %d: rank %d of launch %d at %.2f s%s (resumed at step %d, logged to step %d, "
      .. "latest now step %d)%s%s"):format(i, k.rank, job.n, t_kill,
      k.aim and (target and (" aimed at the save of step " .. target) or " aimed at a save")
      or "", resume_at, last, latest,
      in_save and (", in the save of step " .. in_save) or "",
      interrupted and (", " .. interrupted) or ""))
end

-- 3. the last launch runs to the end (after the kills, or as the one that finished first)
if not broken then
   if job == ref_job or job.rc ~= 0 then
      job = relaunch()
      local resume_at = job.resume_at
      local rc = wait(job, math.max(300, 10 * D))
      if rc == nil then
         expect(false, ("the last launch (resuming at step %d) ends; it did not: %s")
            :format(resume_at, end_hung(job)))
         broken = true
      elseif rc ~= 0 then
         report_broken(job, ("the last launch (resuming at step %d) succeeds (status %d)")
            :format(resume_at, rc))
      end
   end
end
local wall = now() - t_chaos

if not broken then
   expect(job.rc == 0, "the job ends successfully after the kills")
   local got = slurp(run.params)
   expect(got ~= nil, "the final --save-params file exists")
   expect(got == ref.params_bytes, ("the final parameters are byte-identical to the "
      .. "uninterrupted run's (%s bytes vs %d)"):format(got and #got or "no", #ref.params_bytes))
   if got ~= ref.params_bytes then
      io.stderr:write("chaos: the last launch (", job.n, ", resuming at step ", job.resume_at,
         ") ended with status 0; its output ends:\n", tail(job.out, 30),
         "\nchaos: the checkpoint directory ", run.dir, " held before it:\n", job.before, "\n")
   end
   local by_step, bad = read_log(run.log)
   expect(#bad == 0, "every log line is a JSON step or configuration record ("
      .. (bad[1] or "") .. ")")
   local missing, differ = {}, {}
   for n = 1, S do
      local a, b = by_step[n], ref.by_step[n]
      if a == nil then
         missing[#missing + 1] = n
      elseif a.loss ~= b.loss or a.val_loss ~= b.val_loss then
         differ[#differ + 1] = ("step %d: %.17g vs %.17g"):format(n, a.loss, b.loss)
      end
   end
   expect(#missing == 0, "the log has every step (missing: " .. table.concat(missing, " ") .. ")")
   expect(#differ == 0, "every step's loss equals the uninterrupted run's (" .. (differ[1] or "")
      .. (#differ > 1 and (", and " .. (#differ - 1) .. " more") or "") .. ")")
end

local by_rank = {}
for r = 0, np - 1 do by_rank[#by_rank + 1] = ("rank %d: %d"):format(r, stats.by_rank[r]) end
print(("chaos: seed %d: %d kills made (%s), %d aimed at saves; %d while a save was in "
   .. "progress (a step-N.tmp existed), %d interrupting one (it left a step-N.tmp, or a step-N "
   .. "newer than latest); %d while the ranks were starting; %d resumes (%d from a checkpoint), "
   .. "%d steps redone; %d launch(es) finished before the kill time; %.1f s of chaos after a "
   .. "%.1f s reference%s"):format(seed, stats.kills, table.concat(by_rank, ", "), stats.aimed,
   stats.in_save, stats.during_save, stats.waited_for_ranks, stats.resumes,
   stats.from_checkpoint, stats.redone, stats.finished_early, wall, D,
   stats.launcher_hangs > 0 and ("; mpirun hung after " .. stats.launcher_hangs .. " kill(s) "
      .. "with every rank ended (OpenMPI, see above)") or ""))
if tally.failed == 0 and not v.keep_files then
   sh("rm -rf '" .. work .. "'")
else
   print("chaos: files kept in " .. work)
end
tally.finish("chaos")
