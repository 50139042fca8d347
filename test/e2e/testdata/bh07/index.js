// BH-07: V8 Math.random state and hash seed inherited by Node zygote children.
const crypto = require('crypto');
Math.random(); crypto.randomBytes(8);
module.exports.handler = () => ({
  m: Math.random(),
  c: crypto.randomBytes(8).toString('hex'),
  v: require('vm').runInNewContext('Math.random()'),
});
