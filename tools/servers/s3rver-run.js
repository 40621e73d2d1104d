// Runs @20minutes/s3rver (SigV4-verifying S3 emulator) on 127.0.0.1 for the live tests.
// usage: node s3rver-run.js MODULE_DIR DATA_DIR BUCKET PORT_FILE
'use strict';
const fs = require('fs');
const path = require('path');
const [moduleDir, dataDir, bucket, portFile] = process.argv.slice(2);
const S3rver = require(path.join(moduleDir, 'node_modules', '@20minutes', 's3rver'));
const server = new S3rver({
  address: '127.0.0.1',
  port: 0,
  silent: true,
  directory: dataDir,
  vhostBuckets: false,
  allowMismatchedSignatures: false,
  configureBuckets: [{ name: bucket }],
});
server.run().then((address) => {
  const port = address && address.port ? address.port : server.httpServer.address().port;
  fs.writeFileSync(portFile + '.tmp', String(port) + '\n');
  fs.renameSync(portFile + '.tmp', portFile);
}, (err) => {
  console.error('s3rver-run: ' + err);
  process.exit(1);
});
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => server.close().then(() => process.exit(0), () => process.exit(0)));
}
