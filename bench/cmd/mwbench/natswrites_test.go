package main

import "testing"

func TestClassify(t *testing.T) {
	const req = "APP_MEDIA_REQUESTS"
	for _, c := range []struct {
		m    tapped
		want writeClass
	}{
		{tapped{subject: "app.media.optimize.request", reply: "_INBOX.x"}, wcRequest},
		{tapped{subject: "app.media.optimize.work.image"}, wcLaneCopy},
		{tapped{subject: "app.media.optimize.work.video.17"}, wcLaneCopy}, // past the cap
		{tapped{subject: "$KV.APP_MEDIA_SETTLED.17", value: "routed"}, wcRouted},
		{tapped{subject: "$KV.APP_MEDIA_SETTLED.17", value: `{"at":"`}, wcOutbox},
		{tapped{subject: "$KV.APP_MEDIA_SETTLED.17", value: "final"}, wcFinal},
		{tapped{subject: "$KV.APP_MEDIA_REUSE.ab12.default-x.27000"}, wcReuse},
		{tapped{subject: "app.media.optimize.response"}, wcResponse},
		{tapped{subject: "app.media.optimize.response.virus"}, wcVirus},
		{tapped{subject: "$O.media.C.abc"}, wcObjChunk},
		{tapped{subject: "$O.media.M.abc"}, wcObjMeta},
		// A delivery: to an inbox, its reply the ack subject of the stream and consumer.
		{tapped{subject: "_INBOX.y", reply: "$JS.ACK.APP_MEDIA_REQUESTS.mediaworker.1.5.5.1700000000.0"}, wcDeliver},
		{tapped{subject: "_INBOX.y", reply: "$JS.ACK.APP_MEDIA_RESPONSES.ordered.1.5.5.1700000000.0"}, wcEphemeral},
		{tapped{subject: "$JS.ACK.APP_MEDIA_REQUESTS.mediaworker-image.1.6.1.1700000000.0", value: "+ACK"}, wcAck},
		{tapped{subject: "$JS.ACK.APP_MEDIA_REQUESTS.mediaworker-video.1.6.1.1700000000.0", value: "+WPI"}, wcWPI},
		{tapped{subject: "$JS.ACK.APP_MEDIA_REQUESTS.mediaworker.1.6.1.1700000000.0", value: "+TERM reason"}, wcNakTerm},
		{tapped{subject: "$JS.API.CONSUMER.MSG.NEXT.APP_MEDIA_REQUESTS.mediaworker-image"}, wcPull},
		{tapped{subject: "$JS.API.CONSUMER.MSG.NEXT.OBJ_media.abc"}, wcEphemeral},
		{tapped{subject: "$JS.API.DIRECT.GET.KV_APP_MEDIA_SETTLED.$KV.APP_MEDIA_SETTLED.17"}, wcRead},
		{tapped{subject: "$JS.API.STREAM.INFO.APP_MEDIA_REQUESTS"}, wcAPI},
		{tapped{subject: "app.media.optimize.progress.abc"}, wcNotStored},
	} {
		if got := classify(c.m, "app", req); got != c.want {
			t.Errorf("classify(%s, reply %q, %q) = %q, want %q", c.m.subject, c.m.reply, c.m.value, got.name, c.want.name)
		}
	}
	// The v2 ack subject has a domain and an account hash before the stream.
	if s := ackStream("$JS.ACK.hub.ACCHASH.APP_MEDIA_REQUESTS.mediaworker.1.5.5.1700000000.0.rand"); s != req {
		t.Errorf("ackStream v2 = %q", s)
	}
}
