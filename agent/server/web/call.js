// The call page: one WebRTC peer connection to the agent, the transcript over SSE.
"use strict";

const button = document.getElementById("call");
const statusLine = document.getElementById("status");
const transcript = document.getElementById("transcript");
const agentAudio = document.getElementById("agent-audio");

let current = null;

function setStatus(text, isError = false) {
  statusLine.textContent = text;
  statusLine.className = isError ? "error" : "";
}

function addLine(speaker, text) {
  const line = document.createElement("div");
  line.className = `line ${speaker}`;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = speaker === "agent" ? "Agent" : "You";
  line.append(who, document.createTextNode(text));
  transcript.append(line);
}

function iceGatheringComplete(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const check = () => {
      if (pc.iceGatheringState === "complete") {
        pc.removeEventListener("icegatheringstatechange", check);
        resolve();
      }
    };
    pc.addEventListener("icegatheringstatechange", check);
    setTimeout(resolve, 3000); // send what we have rather than wait forever
  });
}

async function startCall() {
  setStatus("asking for the microphone...");
  const microphone = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
  });
  const pc = new RTCPeerConnection();
  current = { pc, microphone, events: null, callId: null };
  pc.addTransceiver(microphone.getAudioTracks()[0], { direction: "sendrecv" });
  pc.ontrack = (event) => {
    agentAudio.srcObject = event.streams[0] || new MediaStream([event.track]);
    agentAudio.play().catch(() => setStatus("press play: the browser blocked audio", true));
  };
  pc.onconnectionstatechange = () => {
    if (pc.connectionState === "connected") setStatus("connected");
    if (["failed", "closed"].includes(pc.connectionState)) endCall(`call ${pc.connectionState}`);
  };
  await pc.setLocalDescription(await pc.createOffer());
  await iceGatheringComplete(pc);
  setStatus("calling...");
  const response = await fetch("/api/offer", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ sdp: pc.localDescription.sdp, type: "offer" }),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || `the server answered ${response.status}`);
  current.callId = answer.call_id;
  await pc.setRemoteDescription({ sdp: answer.sdp, type: answer.type });
  const token = encodeURIComponent(answer.transcript_token);
  const events = new EventSource(`/api/calls/${answer.call_id}/transcript?token=${token}`);
  events.onmessage = (event) => {
    const line = JSON.parse(event.data);
    addLine(line.speaker, line.text);
  };
  events.addEventListener("end", () => events.close());
  current.events = events;
  button.textContent = "Hang up";
  button.classList.add("active");
}

function endCall(reason = "call ended") {
  if (!current) return;
  current.pc.close();
  current.microphone.getTracks().forEach((track) => track.stop());
  if (current.events) setTimeout(() => current?.events?.close(), 2000);
  current = null;
  button.textContent = "Call";
  button.classList.remove("active");
  setStatus(reason);
}

// How much sound the agent has sent us so far (for a glance, and for tests).
async function agentAudioEnergy() {
  if (!current) return 0;
  const stats = await current.pc.getStats();
  let energy = 0;
  stats.forEach((report) => {
    if (report.type === "inbound-rtp" && report.kind === "audio") energy += report.totalAudioEnergy || 0;
  });
  return energy;
}

button.addEventListener("click", async () => {
  if (current) return endCall("you hung up");
  button.disabled = true;
  try {
    transcript.replaceChildren();
    await startCall();
  } catch (error) {
    endCall();
    setStatus(`could not call: ${error.message}`, true);
  } finally {
    button.disabled = false;
  }
});

window.agentCall = { agentAudioEnergy, callId: () => current && current.callId };
