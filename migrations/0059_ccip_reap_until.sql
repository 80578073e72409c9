-- Issue 44 item 3, follow-up to migrations/0058: the reaper's lease gets an end of
-- its own. 0058's lease relied on the claim's updated_at bump, which keeps an
-- intent from being claimed again only for MG_CCIP_SEND_INTENT_STRANDED_SECONDS:
-- with a threshold shorter than the lookups, a second reaper re-leased intents
-- whose lookups were in flight, and the verdicts of both could be dropped. Now
-- the claim skips intents leased until a time still to come (reap_until: the
-- claim's now() + MG_NODE_OBSERVE_LEASE_SECONDS). Nullable, no default.
ALTER TABLE ccip_send_intents ADD COLUMN reap_until timestamptz;
