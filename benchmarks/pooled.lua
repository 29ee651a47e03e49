#!/usr/bin/sysbench
-- An application's connection pool, on one of sysbench's OLTP tests (KNOBLAB_POOLED_TEST,
-- default oltp_read_write): each thread a pooled connection whose statements are prepared on
-- the server as it opens (sysbench's default), and which, when the server ends it, is
-- replaced by a new connection that prepares them again, as a pool does (Go's database/sql,
-- HikariCP). The transaction under way when it was lost is begun again on the new one.
-- sysbench's own reconnect (--mysql-ignore-errors=2013,...) crashes in libmariadb here
-- (sysbench 1.0.20, Debian 12), so it is not used. Each replacement prints one line,
-- "pooled: reconnected", which the caller counts.
--
--   KNOBLAB_POOLED_TEST=oltp_read_only sysbench benchmarks/pooled.lua --tables=1 ... run

require(os.getenv("KNOBLAB_POOLED_TEST") or "oltp_read_write")

local event_of_the_test = event

-- The client's errors for a connection the server ended or lost.
local LOST = {[2006] = true, [2013] = true, [2055] = true, [1927] = true}

local function lost(err)
   local errno = type(err) == "string" and tonumber(err:match("errno = (%d+)"))
   return errno and LOST[errno]
end

function event()
   local ok, err = pcall(event_of_the_test)
   if ok then
      return
   end
   if not lost(err) then
      error(err, 0)
   end
   -- The lost connection's statements and handle are left to the collector: closing them
   -- on a dead connection is what crashes.
   con = drv:connect()
   stmt, param = {}, {}
   for t = 1, sysbench.opt.tables do
      stmt[t], param[t] = {}, {}
   end
   prepare_statements()
   print("pooled: reconnected")
   return event()
end
