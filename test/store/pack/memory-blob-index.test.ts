import { MemoryBlobIndex } from '../../../src/store/pack/memory-blob-index.js';
import { blobIndexContract } from '../../contracts/blob-index.contract.js';

blobIndexContract('MemoryBlobIndex', {
  async create() {
    const index = new MemoryBlobIndex();
    return { index, record: async (packs) => index.addPacks(packs) };
  },
  async cleanup() {},
});
