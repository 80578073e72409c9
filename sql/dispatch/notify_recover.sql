-- After a submit's UNKNOWN outcome, once its request has moved on: wake every
-- process's node_recovery (see dispatch.submit_all). qtg_notify honours
-- qtg.notify = off like the triggers do.
SELECT qtg_notify('qtg_recover')
